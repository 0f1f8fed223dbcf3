"""Counts of calls beneath an entity, and error flags and rates."""

from __future__ import annotations

from ..context import Node
from ..metric import EvaluationInput, MetricValue, NotApplicable, Outcome, native_metric
from ..ontology import Label


def _count(label: Label):
    def compute(entity: Node, inp: EvaluationInput) -> Outcome:
        if unknown := inp.session.unknown_beneath(entity, label):
            return NotApplicable(unknown)
        return MetricValue(
            value=float(len(inp.session.beneath(entity, label))),
            reasoning=inp.session.inferred_note(entity, label),
        )

    return compute


native_metric("LLMCallCount")(_count(Label.LLM_CALL))
native_metric("ToolCallCount")(_count(Label.TOOL_CALL))
native_metric("AgentCallCount")(_count(Label.AGENT_CALL))


@native_metric("ToolError")
def tool_error(entity: Node, inp: EvaluationInput) -> Outcome:
    # success absent means "not known", which is not a failure.
    failed = entity.success is False
    return MetricValue(
        value=1.0 if failed else 0.0,
        reasoning=entity.get("errorMessage") if failed else None,
    )


def _error_rate(label: Label, noun: str):
    def compute(entity: Node, inp: EvaluationInput) -> Outcome:
        if unknown := inp.session.unknown_beneath(entity, label):
            return NotApplicable(unknown)
        calls = inp.session.beneath(entity, label)
        if not calls:
            return NotApplicable(f"no {noun} beneath")
        failed = sum(1 for c in calls if c.success is False)
        unknown = sum(1 for c in calls if c.success is None)
        return MetricValue(
            value=failed / len(calls),
            numerator=float(failed),
            denominator=float(len(calls)),
            reasoning=inp.session.inferred_note(entity, label),
            metadata={"status_unknown": unknown},
        )

    return compute


native_metric("ToolErrorRate")(_error_rate(Label.TOOL_CALL, "tool calls"))
native_metric("LLMErrorRate")(_error_rate(Label.LLM_CALL, "LLM calls"))
