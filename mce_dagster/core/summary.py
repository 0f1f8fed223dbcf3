"""Summary statistics of a metric's values, the one definition the run metadata,
the CLI and the demo share. Pure."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ValueSummary:
    count: int
    mean: float
    minimum: float
    maximum: float
    # sum(numerator) / sum(denominator), when every value is a ratio: the roll-up
    # of a rate, which the mean of per-entity rates is not.
    pooled: float | None


def summarize_values(values: Iterable[tuple[float, float | None, float | None]]) -> ValueSummary | None:
    """(value, numerator, denominator) triples -> their summary; None when empty."""
    rows = list(values)
    if not rows:
        return None
    plain = [float(v) for v, _, _ in rows]
    pooled = None
    if all(den for _, _, den in rows):
        pooled = sum(num or 0.0 for _, num, _ in rows) / sum(den for _, _, den in rows)
    return ValueSummary(len(rows), statistics.fmean(plain), min(plain), max(plain), pooled)
