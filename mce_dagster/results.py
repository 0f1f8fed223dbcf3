"""Results read back from the graph, in the shape the CLI and the client show."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .core.summary import summarize_values

RESULT_FIELDS: tuple[tuple[str, str], ...] = (
    ("metric", "name"),
    ("provider", "provider"),
    ("scope", "scope"),
    ("entity_id", "entityId"),
    ("session_id", "sessionId"),
    ("value", "result"),
    ("numerator", "numerator"),
    ("denominator", "denominator"),
    ("reasoning", "reasoning"),
    ("method", "evaluationMethod"),
    ("evaluation_model", "evaluationModel"),
    ("evaluation_prompt_tokens", "evaluationPromptTokenCount"),
    ("evaluation_completion_tokens", "evaluationCompletionTokenCount"),
    ("evaluation_total_tokens", "evaluationTotalTokenCount"),
    ("evaluation_cost", "evaluationCost"),
    ("metric_version", "metricVersion"),
    ("computed_at", "computedAt"),
    ("metadata", "metadata"),
    ("run_id", "runId"),
    ("id", "id"),
)


def to_public(props: Mapping[str, Any]) -> dict[str, Any]:
    """One MetricResult node as a flat record (null where not applicable)."""
    return {public: props.get(graph) for public, graph in RESULT_FIELDS}


@dataclass(frozen=True)
class MetricSummary:
    metric: str
    scope: str
    evaluated: int
    mean: float
    minimum: float
    maximum: float
    pooled: float | None  # sum(numerator) / sum(denominator), for ratios


def summarize(results: Iterable[Mapping[str, Any]]) -> list[MetricSummary]:
    """Per (scope, metric): count, mean, min, max; ratios also rolled up as sum over sum."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in results:
        groups[(r["scope"], r["metric"])].append(r)
    out = []
    for (scope, metric), rows in sorted(groups.items(), key=lambda kv: (kv[0][0] != "Session", kv[0])):
        s = summarize_values((r["value"], r.get("numerator"), r.get("denominator")) for r in rows)
        out.append(MetricSummary(metric, scope, s.count, s.mean, s.minimum, s.maximum, s.pooled))
    return out


def top_sessions(results: Iterable[Mapping[str, Any]], metric: str, n: int = 5) -> list[tuple[str, float]]:
    rows = [(r["session_id"], float(r["value"])) for r in results if r["metric"] == metric and r["scope"] == "Session"]
    rows.sort(key=lambda x: (-x[1], x[0]))
    return [r for r in rows[:n] if r[1] > 0]
