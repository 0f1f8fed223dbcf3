"""The keys of a dynamic partitions definition, read once and kept while the table
shows no change.

Dagster reads every key of a dynamic partitions definition whenever it resolves a
partition range: for each asset when a run is created (its planned events), and again
as each step resolves its inputs and outputs. With one partition per session, at
100,000 sessions each read fetches 100,000 rows into Python, hundreds of times per
run. Here a read first asks for the table's largest id, one index lookup on SQLite
and PostgreSQL alike; while it is unchanged the keys read last are returned. Adding
or deleting through this storage drops the cached keys at once, and a key added by
another process has a larger id. What the largest id cannot show, a deletion by
another process (or, on SQLite, a deleted newest key whose id is reused by the next
one), is seen once the cached keys are `MAX_AGE_S` old: the project itself never
deletes a session's partition.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import sqlalchemy as db
# Private: the event log's dynamic partitions table (its `id` column), read directly.
from dagster._core.storage.event_log.schema import DynamicPartitionsTable

#: Seconds cached keys are trusted on an unchanged largest id before they are read again.
MAX_AGE_S = 30.0


class CachedDynamicPartitions:
    """Mixed into the project's event log storages (SQLite and PostgreSQL), before
    Dagster's SQL event log storage in the bases."""

    def _partition_cache(self) -> dict[str, tuple[object, float, tuple[str, ...]]]:
        """Definition name -> (largest id, when read, keys)."""
        try:
            return self._cached_partition_keys
        except AttributeError:
            self._cached_partition_keys: dict[str, tuple[object, float, tuple[str, ...]]] = {}
            return self._cached_partition_keys

    def _partitions_stamp(self) -> object:
        """The largest id of the dynamic partitions table (of every definition)."""
        with self.index_connection() as conn:  # type: ignore[attr-defined]
            return conn.execute(db.select(db.func.max(DynamicPartitionsTable.c.id))).scalar()

    def get_dynamic_partitions(self, partitions_def_name: str) -> Sequence[str]:
        self._check_partitions_table()  # type: ignore[attr-defined]
        cache = self._partition_cache()
        # The id before the keys: a key added in between makes the next id differ.
        stamp = self._partitions_stamp()
        cached = cache.get(partitions_def_name)
        if cached is not None and cached[0] == stamp and time.monotonic() - cached[1] < MAX_AGE_S:
            return list(cached[2])
        keys = tuple(super().get_dynamic_partitions(partitions_def_name))  # type: ignore[misc]
        cache[partitions_def_name] = (stamp, time.monotonic(), keys)
        return list(keys)

    def add_dynamic_partitions(self, partitions_def_name: str, partition_keys: Sequence[str]) -> None:
        try:
            super().add_dynamic_partitions(partitions_def_name, partition_keys)  # type: ignore[misc]
        finally:
            self._partition_cache().pop(partitions_def_name, None)

    def delete_dynamic_partition(self, partitions_def_name: str, partition_key: str) -> None:
        try:
            super().delete_dynamic_partition(partitions_def_name, partition_key)  # type: ignore[misc]
        finally:
            self._partition_cache().pop(partitions_def_name, None)
