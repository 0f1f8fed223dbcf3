"""Asset backfills over a set of session partitions, for the sensors: the request a
tick makes, and the sessions the instance's live backfills already cover.

Dagster's public API asks for a backfill over many partitions only through
`RunRequest.for_asset_graph_subset`, whose argument type is not public, and lists
backfills only with a filter type that is not public either. What this relies on,
to check on an upgrade (tests/test_sensors.py and tests/test_ui.py exercise both):

- `AssetGraphSubset(partitions_subsets_by_asset_key=...)` and its `in` test on an
  `AssetKeyPartitionKey` (dagster._core.definitions.assets.graph.asset_graph_subset,
  dagster._core.definitions.events);
- `BulkActionStatus`, `BulkActionsFilter(statuses=...)` and a backfill's
  `asset_backfill_data.target_subset` (dagster._core.execution.backfill).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import dagster as dg
from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset
from dagster._core.definitions.events import AssetKeyPartitionKey
from dagster._core.execution.backfill import BulkActionStatus, BulkActionsFilter

# Backfills whose runs may still be launched or running.
_LIVE = [BulkActionStatus.REQUESTED, BulkActionStatus.CANCELING, BulkActionStatus.FAILING]
# How many of the newest backfills are looked through.
LIVE_BACKFILLS_READ = 200


def backfill_request(
    partitions_def: dg.DynamicPartitionsDefinition,
    partition_keys: Sequence[str],
    asset_keys: Iterable[dg.AssetKey],
    tags: Mapping[str, str],
) -> dg.RunRequest:
    """One asset backfill over exactly these partitions of every asset given."""
    subset = partitions_def.subset_with_partition_keys(list(partition_keys))
    graph_subset = AssetGraphSubset(partitions_subsets_by_asset_key={k: subset for k in asset_keys})
    return dg.RunRequest.for_asset_graph_subset(graph_subset, tags=dict(tags))


def in_live_backfills(instance: dg.DagsterInstance, asset_key: dg.AssetKey, partition_keys: Iterable[str]) -> set[str]:
    """Those of the partitions of `asset_key` that a backfill still running targets."""
    keys = list(partition_keys)
    found: set[str] = set()
    if not keys:
        return found
    for backfill in instance.get_backfills(filters=BulkActionsFilter(statuses=_LIVE), limit=LIVE_BACKFILLS_READ):
        data = backfill.asset_backfill_data
        if data is None:
            continue
        target = data.target_subset
        found.update(k for k in keys if AssetKeyPartitionKey(asset_key, k) in target)
    return found
