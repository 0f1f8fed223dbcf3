"""The keys of a dynamic partitions definition, read once and kept while the table
says nothing changed.

Dagster reads every key of a dynamic partitions definition whenever it resolves a
partition range: for each asset when a run is created (its planned events), and again
as the run's steps resolve their partitions. With one partition per session, at
100,000 sessions each read fetches 100,000 rows into Python, dozens of times per run.
Here a read first asks the table for a stamp computed in the database (how many keys,
the largest id, the newest creation time, the keys' total length and the largest
key); while it is unchanged the keys read last are returned. Adding or deleting
through this storage drops the cached keys at once; a change made by another process
changes the stamp. The stamp cannot tell apart, in one case only, a deleted newest key
replaced by another of the same length within the same second (SQLite reuses the
freed id): the cached keys are trusted for at most `MAX_AGE_S`, so even then a reader
sees the change within that time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import sqlalchemy as db
from dagster._core.storage.event_log.schema import DynamicPartitionsTable

#: Seconds cached keys are trusted on an unchanged stamp before they are read again.
MAX_AGE_S = 60.0


class CachedDynamicPartitions:
    """Mixed into the project's event log storages (SQLite and PostgreSQL), before
    Dagster's SQL event log storage in the bases."""

    def _partition_cache(self) -> dict[str, tuple[tuple, float, tuple[str, ...]]]:
        """Definition name -> (stamp, when read, keys)."""
        try:
            return self._cached_partition_keys
        except AttributeError:
            self._cached_partition_keys: dict[str, tuple[tuple, float, tuple[str, ...]]] = {}
            return self._cached_partition_keys

    def _partitions_stamp(self, partitions_def_name: str) -> tuple:
        table = DynamicPartitionsTable
        query = db.select(
            db.func.count(),
            db.func.max(table.c.id),
            db.func.max(table.c.create_timestamp),
            db.func.sum(db.func.length(table.c.partition)),
            db.func.max(table.c.partition),
        ).where(table.c.partitions_def_name == partitions_def_name)
        with self.index_connection() as conn:  # type: ignore[attr-defined]
            return tuple(conn.execute(query).one())

    def get_dynamic_partitions(self, partitions_def_name: str) -> Sequence[str]:
        self._check_partitions_table()  # type: ignore[attr-defined]
        cache = self._partition_cache()
        # The stamp before the keys: a change in between makes the next stamp differ.
        stamp = self._partitions_stamp(partitions_def_name)
        cached = cache.get(partitions_def_name)
        if cached is not None and cached[0] == stamp and time.monotonic() - cached[1] < MAX_AGE_S:
            return list(cached[2])
        keys = tuple(super().get_dynamic_partitions(partitions_def_name))  # type: ignore[misc]
        cache[partitions_def_name] = (stamp, time.monotonic(), keys)
        return list(keys)

    def add_dynamic_partitions(self, partitions_def_name: str, partition_keys: Sequence[str]) -> None:
        self._partition_cache().pop(partitions_def_name, None)
        super().add_dynamic_partitions(partitions_def_name, partition_keys)  # type: ignore[misc]
        self._partition_cache().pop(partitions_def_name, None)

    def delete_dynamic_partition(self, partitions_def_name: str, partition_key: str) -> None:
        self._partition_cache().pop(partitions_def_name, None)
        super().delete_dynamic_partition(partitions_def_name, partition_key)  # type: ignore[misc]
        self._partition_cache().pop(partitions_def_name, None)
