"""What the pooled event logs share: which batches take the statement-per-table path,
and the asset rows a batch leaves."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from typing import Any

from dagster import DagsterEventType, EventLogEntry

# Private: the SQL event log base class, for `_get_asset_entry_values` (the columns of
# an asset's `asset_keys` row that one event sets).
from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage

# Runs of these in a batch (all that Dagster batches but asset check plans, and
# failures, which SQLite does not store) are written a statement per table; other
# events one by one, still in the batch's transaction.
FAST_TYPES = frozenset(
    {
        DagsterEventType.ASSET_MATERIALIZATION,
        DagsterEventType.ASSET_OBSERVATION,
        DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
    }
)


def runs_by_path(events: Sequence[EventLogEntry]) -> list[tuple[bool, list[EventLogEntry]]]:
    """Consecutive events that take the statement-per-table path, and those that do not.
    A run's planned events end with its asset check plans: those few go one by one,
    the planned materializations before them in the same batch do not."""
    return [(fast, list(run)) for fast, run in groupby(events, key=lambda e: e.dagster_event_type in FAST_TYPES)]


def latest_asset_rows(
    storage: SqlEventLogStorage, events: Sequence[EventLogEntry], event_ids: Sequence[int], index_cols: bool
) -> dict[str, dict[str, Any]]:
    """Asset key -> the columns of its `asset_keys` row as storing the events one by one
    (stock `_store_asset_event`) would leave them. Each event sets some columns; the
    last to set one wins. From the end: a materialization sets every column the others
    set, so events before it are skipped (each would serialize the whole event again)."""
    latest: dict[str, dict[str, Any]] = {}
    for event, event_id in zip(reversed(events), reversed(event_ids)):
        asset_key = event.dagster_event.asset_key if event.dagster_event else None
        if asset_key is None:
            continue
        merged = latest.setdefault(asset_key.to_string(), {})
        if "last_materialization" in merged:
            continue
        for column, value in storage._get_asset_entry_values(event, event_id, index_cols).items():
            merged.setdefault(column, value)
    return {key: values for key, values in latest.items() if values}
