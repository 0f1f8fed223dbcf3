"""Asset checks computed in the asset bodies, from what each run evaluated.

A run covers a batch of sessions, so each check result covers the run's
partitions (not one partition): its metadata names the sessions that fail it,
and carries the run's summary of the asset (results written, mean, min, max).
That summary is written once per run here rather than on each partition's
materialization, where Dagster would repeat it for every session of the batch.
Nothing here reads the graph: the checks use the session contexts and the
results the asset already holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import dagster as dg

from ..core.context import SessionContext
from ..core.evaluate import MetricBatch
from ..core.metric import MetricValue
from ..core.ontology import ROWS_NOT_PLACED, Scope

COVERAGE_CHECK = "every_entity_accounted_for"
RANGE_CHECK = "values_in_range"
PLACED_CHECK = "every_row_placed"
_SHOWN = 20
_RUN_NOTE = " One result per run, over all of the run's sessions; its metadata names the sessions that fail it."


def metric_check_specs(key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            COVERAGE_CHECK,
            asset=key,
            description="Every entity of the metric's scope in each evaluated session has a stored result, "
            "a not-applicable or a reported failure: nothing is silently missing." + _RUN_NOTE,
        ),
        dg.AssetCheckSpec(
            RANGE_CHECK, asset=key, description="Every value lies in the metric's range (metric_defs/)." + _RUN_NOTE
        ),
    ]


def session_check_specs(key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            PLACED_CHECK,
            asset=key,
            description="Warns on sessions whose ingestion could not place some of their rows (rowsNotPlaced "
            "on the Session): their metrics see an incomplete session." + _RUN_NOTE,
        )
    ]


def markdown_table(rows: Sequence[tuple[str, ...]], header: tuple[str, ...]) -> dg.MetadataValue:
    """A markdown table (cells with `|` escaped), the first rows of it."""
    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows[:_SHOWN]]
    if len(rows) > _SHOWN:
        lines.append(f"\n{len(rows) - _SHOWN} more not shown")
    return dg.MetadataValue.md("\n".join(lines))


def _sessions_text(sessions: Sequence[str]) -> str:
    shown = ", ".join(sessions[:_SHOWN])
    return shown + (f" and {len(sessions) - _SHOWN} more" if len(sessions) > _SHOWN else "")


def coverage_result(
    scope: Scope,
    contexts: Mapping[str, SessionContext],
    batch: MetricBatch,
    stored: Mapping[str, Mapping[str, MetricValue]],
    summary: Mapping[str, object] | None = None,
) -> dg.AssetCheckResult:
    """Entities of the scope, per session, against stored + not applicable + failed."""
    failed = {(f.session_id, f.entity_id) for f in batch.failures}
    missing: list[tuple[str, str, str]] = []
    entities = 0
    for sid, ctx in contexts.items():
        accounted = set(stored.get(sid, {})) | batch.not_applicable_ids.get(sid, set())
        for entity in ctx.entities(scope):
            entities += 1
            if entity.id in accounted or (sid, entity.id) in failed:
                continue
            why = (
                "a value was computed but not stored (see the run's log)"
                if entity.id in batch.values.get(sid, {})
                else "no result, not-applicable or failure"
            )
            missing.append((sid, entity.id, why))
    sessions = sorted({m[0] for m in missing})
    metadata: dict[str, object] = {
        "sessions": dg.MetadataValue.int(len(contexts)),
        "entities": dg.MetadataValue.int(entities),
        "missing": dg.MetadataValue.int(len(missing)),
        **(summary or {}),
    }
    if missing:
        metadata["sessions with missing entities"] = dg.MetadataValue.text(_sessions_text(sessions))
        metadata["missing entities"] = markdown_table(missing, ("session", "entity", "why"))
    description = (
        f"{len(missing)} of {entities} entities missing in {len(sessions)} session(s): {_sessions_text(sessions)}"
        if missing
        else f"all {entities} entities accounted for in {len(contexts)} session(s)"
    )
    return dg.AssetCheckResult(check_name=COVERAGE_CHECK, passed=not missing, metadata=metadata, description=description)


def range_text(value_range: Sequence[float | None]) -> str:
    """`[0, 1]`, `[0, inf]`: a metric's range as a person reads it."""
    lo, hi = value_range
    return f"[{'-inf' if lo is None else f'{lo:g}'}, {'inf' if hi is None else f'{hi:g}'}]"


def _outside(value: object, lo: float | None, hi: float | None) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return True
    return (lo is not None and value < lo - 1e-12) or (hi is not None and value > hi + 1e-12)


def range_result(
    value_range: Sequence[float | None],
    values: Mapping[str, Mapping[str, MetricValue]],
    summary: Mapping[str, object] | None = None,
) -> dg.AssetCheckResult:
    lo, hi = value_range
    bad = [
        (sid, eid, repr(v.value))
        for sid, by_entity in values.items()
        for eid, v in by_entity.items()
        if _outside(v.value, lo, hi)
    ]
    shown_range = range_text(value_range)
    sessions = sorted({b[0] for b in bad})
    metadata: dict[str, object] = {
        "range": dg.MetadataValue.text(shown_range),
        "outside": dg.MetadataValue.int(len(bad)),
        **(summary or {}),
    }
    if bad:
        metadata["sessions with values outside"] = dg.MetadataValue.text(_sessions_text(sessions))
        metadata["values outside"] = markdown_table(bad, ("session", "entity", "value"))
    description = (
        f"{len(bad)} value(s) outside {shown_range} in {len(sessions)} session(s): {_sessions_text(sessions)}"
        if bad
        else f"every value within {shown_range}"
    )
    return dg.AssetCheckResult(check_name=RANGE_CHECK, passed=not bad, metadata=metadata, description=description)


def placed_result(contexts: Mapping[str, SessionContext], summary: Mapping[str, object] | None = None) -> dg.AssetCheckResult:
    flagged = sorted((sid, int(ctx.session.get(ROWS_NOT_PLACED) or 0)) for sid, ctx in contexts.items() if ctx.session.get(ROWS_NOT_PLACED))
    sessions = [sid for sid, _ in flagged]
    metadata: dict[str, object] = {"sessions flagged": dg.MetadataValue.int(len(flagged)), **(summary or {})}
    if flagged:
        metadata["sessions with rows not placed"] = dg.MetadataValue.text(_sessions_text(sessions))
        metadata["rows not placed"] = markdown_table([(sid, str(n)) for sid, n in flagged], ("session", "rows not placed"))
    description = (
        f"{len(flagged)} session(s) ingested with rows that could not be placed (see `mce ingest`'s report): "
        f"{_sessions_text(sessions)}"
        if flagged
        else f"every row of the {len(contexts)} session(s) was placed"
    )
    return dg.AssetCheckResult(
        check_name=PLACED_CHECK,
        passed=not flagged,
        severity=dg.AssetCheckSeverity.WARN,
        metadata=metadata,
        description=description,
    )
