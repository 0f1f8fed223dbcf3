"""What the evaluation report shows, computed from plain rows: the distribution of
each metric's stored values, and the registry's roll-ups per app and per agent as
tables. Pure: no graph, no drawing, no files."""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.summary import ValueSummary

# Most bars of a histogram; integer-valued metrics over a short range get one bar per value.
MAX_BINS = 30


@dataclass(frozen=True)
class Histogram:
    edges: tuple[float, ...]  # len(counts) + 1, increasing
    counts: tuple[int, ...]


def histogram(values: Iterable[float], max_bins: int = MAX_BINS) -> Histogram:
    """Equal-width bins over [min, max] (the last bin closed); one bin per integer
    when every value is an integer and the range is short, so a count of 3 is one bar."""
    data = sorted(float(v) for v in values)
    if not data:
        return Histogram((), ())
    lo, hi = data[0], data[-1]
    if all(v.is_integer() for v in data) and hi - lo + 1 <= max_bins:
        edges = [lo - 0.5 + i for i in range(int(hi - lo) + 2)]
    elif lo == hi:
        edges = [lo - 0.5, hi + 0.5]
    else:
        bins = max(1, min(max_bins, math.ceil(math.sqrt(len(data)))))
        width = (hi - lo) / bins
        edges = [lo + i * width for i in range(bins)] + [hi]
    counts = [0] * (len(edges) - 1)
    for v in data:
        # bins are [left, right); the largest value belongs to the last bin
        counts[min(len(counts) - 1, bisect.bisect_right(edges, v) - 1)] += 1
    return Histogram(tuple(edges), tuple(counts))


@dataclass(frozen=True)
class Distribution:
    """One metric's stored values at one scope."""

    scope: str
    provider: str
    metric: str
    unit: str | None
    summary: ValueSummary
    histogram: Histogram

    @property
    def key(self) -> str:
        """`Scope/Name`, or `Scope/provider.Name` for another provider than native."""
        return f"{self.scope}/{self.metric}" if self.provider == "native" else f"{self.scope}/{self.provider}.{self.metric}"


@dataclass
class _Values:
    values: array = field(default_factory=lambda: array("d"))
    numerator: float = 0.0
    denominator: float = 0.0
    all_ratios: bool = True

    def add(self, value: float, num: float | None, den: float | None) -> None:
        self.values.append(float(value))
        if den:
            self.numerator += float(num or 0.0)
            self.denominator += float(den)
        else:
            self.all_ratios = False

    def summary(self) -> ValueSummary:
        v = self.values
        pooled = self.numerator / self.denominator if self.all_ratios and self.denominator else None
        return ValueSummary(len(v), math.fsum(v) / len(v), min(v), max(v), pooled)


class DistributionBuilder:
    """Collects results (the records of `mce kg metric get --json`) batch by batch,
    keeping only each value (8 bytes a result), and only results of the metric's
    current version when `versions` ((provider, name) -> version) is given."""

    def __init__(self, versions: Mapping[tuple[str, str], int] | None = None, units: Mapping[tuple[str, str], str] | None = None):
        self._versions = versions
        self._units = units or {}
        self._groups: dict[tuple[str, str, str], _Values] = {}
        self.results = 0
        self.sessions: set[str] = set()
        self.other_versions = 0

    def add(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for r in rows:
            if r.get("value") is None:
                continue
            if self._versions is not None:
                current = self._versions.get((r["provider"], r["metric"]))
                if current is not None and r.get("metric_version") != current:
                    self.other_versions += 1
                    continue
            self._groups.setdefault((r["scope"], r["provider"], r["metric"]), _Values()).add(r["value"], r.get("numerator"), r.get("denominator"))
            self.results += 1
            self.sessions.add(r["session_id"])

    def distributions(self) -> list[Distribution]:
        """Session scope first, then by scope and name."""
        out = [
            Distribution(scope, provider, metric, self._units.get((provider, metric)), g.summary(), histogram(g.values))
            for (scope, provider, metric), g in self._groups.items()
        ]
        return sorted(out, key=lambda d: (d.scope != "Session", d.scope, d.provider, d.metric))


def distributions(rows: Iterable[Mapping[str, Any]], versions: Mapping[tuple[str, str], int] | None = None) -> list[Distribution]:
    builder = DistributionBuilder(versions)
    builder.add(rows)
    return builder.distributions()


@dataclass(frozen=True)
class RollupRow:
    group: str
    value: float | None
    count: int
    numerator: float | None = None
    denominator: float | None = None


@dataclass(frozen=True)
class Rollup:
    """One metric rolled up per app or per agent, as the registry query answers it."""

    cut: str  # "app" or "agent"
    metric: str  # the catalog's reference, `Name` or `provider.Name`
    scope: str
    unit: str | None
    rule: str  # how it rolls up (sum over sum for ratios)
    rows: tuple[RollupRow, ...]

    @property
    def key(self) -> str:
        return f"{self.scope}/{self.metric}"


def rollup_from_answer(answer: Mapping[str, Any]) -> Rollup:
    """A registry answer (results.query.query_metric with `by`) as a report table.
    Groups without a name (sessions with no app) are shown as "(none)"."""
    cut = answer["by"]
    rows = tuple(
        RollupRow(
            "(none)" if r.get(cut) is None else str(r[cut]),
            r.get("value"),
            int(r.get("count") or 0),
            r.get("numerator"),
            r.get("denominator"),
        )
        for r in answer["rows"]
    )
    return Rollup(cut, answer["metric"], answer["scope"], answer.get("unit"), answer["rollup"], rows)


@dataclass(frozen=True)
class Report:
    sessions: int
    results: int
    other_versions: int  # results of older metric versions, left out
    distributions: tuple[Distribution, ...]
    rollups: tuple[Rollup, ...]
    generated_at: str  # ISO 8601, UTC

    def rollups_by(self, cut: str) -> list[Rollup]:
        return [r for r in self.rollups if r.cut == cut]

    def as_json(self) -> dict[str, Any]:
        return {
            "generated_at": self.generated_at,
            "sessions": self.sessions,
            "results": self.results,
            "results_of_other_versions": self.other_versions,
            "distributions": [
                {
                    "metric": d.key,
                    "unit": d.unit,
                    "count": d.summary.count,
                    "mean": d.summary.mean,
                    "min": d.summary.minimum,
                    "max": d.summary.maximum,
                    "pooled": d.summary.pooled,
                    "histogram": {"edges": list(d.histogram.edges), "counts": list(d.histogram.counts)},
                }
                for d in self.distributions
            ],
            "rollups": {
                cut: [
                    {
                        "metric": r.key,
                        "unit": r.unit,
                        "rollup": r.rule,
                        "rows": [{cut: row.group, "value": row.value, "count": row.count, "numerator": row.numerator, "denominator": row.denominator} for row in r.rows],
                    }
                    for r in self.rollups_by(cut)
                ]
                for cut in ("app", "agent")
            },
        }
