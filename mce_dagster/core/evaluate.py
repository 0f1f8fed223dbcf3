"""Evaluating one metric over many sessions: the same code path for Dagster
assets and for plain in-memory runs. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .context import SessionContext
from .metric import (
    DependencyKey,
    EvaluationInput,
    MetricFailure,
    MetricFunction,
    MetricSpec,
    MetricValue,
    NotApplicable,
    PriceLookup,
)
from .ontology import Scope

# session id -> entity id -> value
SessionResults = dict[str, dict[str, MetricValue]]


class EvaluableMetric(Protocol):
    key: DependencyKey
    scope: Scope
    compute: MetricFunction
    dependencies: tuple[DependencyKey, ...]
    definition: MetricSpec


@dataclass(frozen=True)
class EntityFailure:
    session_id: str
    entity_id: str
    reason: str


@dataclass
class MetricBatch:
    values: SessionResults = field(default_factory=dict)
    not_applicable: int = 0
    failures: list[EntityFailure] = field(default_factory=list)
    # session id -> entities the metric said it does not apply to (coverage checks).
    not_applicable_ids: dict[str, set[str]] = field(default_factory=dict)

    @property
    def evaluated(self) -> int:
        return sum(len(v) for v in self.values.values())


def evaluate_metric(
    metric: EvaluableMetric,
    contexts: Mapping[str, SessionContext],
    dependencies: Mapping[DependencyKey, SessionResults],
    prices: PriceLookup | None,
    judgments: Mapping[str, Mapping[str, Any]] | None = None,
) -> MetricBatch:
    """Run one metric on every entity of its scope in every session given.
    A MetricFailure fails that entity only; any other exception is a defect and
    propagates, so that nothing of the batch is written."""
    batch = MetricBatch()
    for session_id, context in contexts.items():
        inp = EvaluationInput(
            session=context,
            dependencies={key: results.get(session_id, {}) for key, results in dependencies.items()},
            prices=prices,
            definition=metric.definition,
            judgments=None if judgments is None else judgments.get(session_id, {}),
        )
        values: dict[str, MetricValue] = {}
        for entity in context.entities(metric.scope):
            try:
                outcome = metric.compute(entity, inp)
            except MetricFailure as exc:
                batch.failures.append(EntityFailure(session_id, entity.id, str(exc)))
                continue
            if isinstance(outcome, NotApplicable):
                batch.not_applicable += 1
                batch.not_applicable_ids.setdefault(session_id, set()).add(entity.id)
            else:
                values[entity.id] = outcome
        batch.values[session_id] = values
    return batch


def evaluate_all(
    metrics: list[EvaluableMetric],
    contexts: Mapping[str, SessionContext],
    prices: PriceLookup | None,
) -> dict[DependencyKey, MetricBatch]:
    """Every metric, dependencies first (the order `Catalog.ordered` gives), in
    memory: no graph, no Dagster."""
    batches: dict[DependencyKey, MetricBatch] = {}
    for metric in metrics:
        deps = {key: batches[key].values for key in metric.dependencies}
        batches[metric.key] = evaluate_metric(metric, contexts, deps, prices)
    return batches
