"""Avg / Min / Max / Sum at Session scope over a call-scope metric's results."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..context import Node
from ..metric import EvaluationInput, MetricFailure, MetricValue, NotApplicable, Outcome

AGGREGATE_FUNCTIONS: dict[str, Callable[[Sequence[float]], float]] = {
    "avg": lambda xs: sum(xs) / len(xs),
    "min": min,
    "max": max,
    "sum": sum,
}


def aggregate(entity: Node, inp: EvaluationInput) -> Outcome:
    """Aggregate the results of the definition's `aggregate.of` metric beneath the
    session. An average keeps its sum and count as numerator and denominator."""
    spec = inp.definition.aggregate if inp.definition else None
    if spec is None:
        raise MetricFailure("aggregate() evaluates only definitions of kind aggregate")
    of = spec.of_key
    results = inp.dependencies.get(of)
    if results is None:
        raise MetricFailure(f"the results of {of} were not loaded")
    entities = inp.session.entities(of.scope)
    values = [results[e.id].value for e in entities if e.id in results]
    if not values:
        return NotApplicable(f"no {of} result beneath")
    value = AGGREGATE_FUNCTIONS[spec.function](values)
    metadata = {"count": len(values), "entities": len(entities)}
    reasoning = None
    if len(values) < len(entities):
        reasoning = f"{len(entities) - len(values)} of {len(entities)} {of.scope.value} entities have no {of.name} result"
    # Over a judged metric, the judge's calls beneath are this result's cost too.
    found = [results[e.id] for e in entities if e.id in results]
    judged = [v for v in found if v.evaluation_model]
    evaluation = {}
    if judged:
        evaluation = {
            "evaluation_model": judged[0].evaluation_model,
            "evaluation_method": f"{spec.function} of {len(judged)} {judged[0].evaluation_method or ''}".strip(),
            "evaluation_prompt_tokens": sum(v.evaluation_prompt_tokens for v in judged),
            "evaluation_completion_tokens": sum(v.evaluation_completion_tokens for v in judged),
            "evaluation_cost": sum(v.evaluation_cost for v in judged),
        }
    if spec.function == "avg":
        return MetricValue(value=value, numerator=float(sum(values)), denominator=float(len(values)), reasoning=reasoning, metadata=metadata, **evaluation)
    return MetricValue(value=float(value), reasoning=reasoning, metadata=metadata, **evaluation)
