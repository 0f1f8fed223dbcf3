"""dagster-postgres' event log with pooled connections and one transaction per event batch.

The stock `PostgresEventLogStorage` (dagster-postgres 0.29.27) opens a new connection
(NullPool) for every statement group, about 40 ms per (asset, partition) on a local
server. Its `store_event_batch` batches only materializations or only observations,
in two connections (so not atomically), and hands planned events to the one-by-one
loop. Here connections are pooled, and every batch is one transaction: asset events
with a statement per table (the rows stock `store_event` writes, the asset row as the
events in order would leave it), any other event by stock `store_event`, whose
connects join that transaction. Same tables: stock storage reads them.

Every event is stored when Dagster hands it over, as stock stores it: the UI, sensors
and the daemon see a batch's materializations as soon as it is written.

Rests on private parts of dagster-postgres (`_connect`, `_engine`) and dagster
(`_event_to_row`, `_get_asset_entry_values`, `_store_asset_event_tags`);
tests/test_instance_postgres.py checks them against the pinned versions.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from dagster import DagsterInvariantViolationError, EventLogEntry

# Private: the config schema type and dagster-postgres' own config schema
# (`postgres_url` / `postgres_db`), so dagster.yaml configures this class as stock.
from dagster._config.config_schema import UserConfigSchema
from dagster._core.storage.config import pg_config

# Private: the secondary index that adds the asset row's index columns.
from dagster._core.storage.event_log.migration import ASSET_KEY_INDEX_COLS

# Private: the event log's tables, written directly by a batch.
from dagster._core.storage.event_log.schema import AssetKeyTable, SqlEventLogStorageTable

# Private: the `inst_data` every configurable storage class is built with.
from dagster._serdes import ConfigurableClassData

# dagster-postgres' event log (subclassed: `_connect`, `_engine`, `store_event`) and
# its engine helpers.
from dagster_postgres.event_log import PostgresEventLogStorage
from dagster_postgres.utils import create_pg_connection, create_pg_engine, get_token_provider_from_config, pg_url_from_config
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection

from ..files import keep_private
from .batch import latest_asset_rows, runs_by_path
from .partitions import CachedDynamicPartitions

#: Connections a process keeps open (a run worker writes from one thread).
POOL_SIZE = 2
#: Server-side idle timeouts drop connections: recycle before.
POOL_RECYCLE_S = 1800


class PooledPostgresEventLogStorage(CachedDynamicPartitions, PostgresEventLogStorage):
    """`event_log_storage: {module: mce_dagster.instance.postgres, class:
    PooledPostgresEventLogStorage, config: {postgres_db: ...}}` in dagster.yaml."""

    def __init__(
        self,
        postgres_url: str,
        should_autocreate_tables: bool = True,
        inst_data: ConfigurableClassData | None = None,
        token_provider: Any = None,
    ):
        # The webserver and the daemon run no code of the project but what the instance's
        # dagster.yaml names: this is where the files they write (logs) become owner-only.
        keep_private()
        self._batch = threading.local()
        self._pid = os.getpid()
        super().__init__(postgres_url, should_autocreate_tables, inst_data, token_provider)
        self._engine.dispose()
        self._engine = self._pooled_engine()

    def _pooled_engine(self):
        return create_pg_engine(
            self.postgres_url,
            self._token_provider,
            isolation_level="AUTOCOMMIT",  # as stock: a statement outside a transaction commits
            pool_size=POOL_SIZE,
            max_overflow=8,
            pool_pre_ping=True,
            pool_recycle=POOL_RECYCLE_S,
        )

    @classmethod
    def config_type(cls) -> UserConfigSchema:
        return pg_config()

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]) -> "PooledPostgresEventLogStorage":
        return cls(
            inst_data=inst_data,
            postgres_url=pg_url_from_config(config_value),
            should_autocreate_tables=config_value.get("should_autocreate_tables", True),
            token_provider=get_token_provider_from_config(config_value),
        )

    @contextmanager
    def _connect(self) -> Iterator[Connection]:  # type: ignore[override]
        joined = getattr(self._batch, "conn", None)
        if joined is not None:
            yield joined  # inside a batch: the stock code's connects join its transaction
            return
        if os.getpid() != self._pid:
            # A forked child must not share the parent's connections.
            self._engine.dispose(close=False)
            self._pid = os.getpid()
        with create_pg_connection(self._engine) as conn:
            yield conn

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """All of the batch or none of it, so Dagster's one-by-one fallback after a
        failed batch writes nothing twice."""
        events = [e for e in events if not (e.dagster_event and e.dagster_event.is_asset_failed_to_materialize)]
        if not events:
            return  # as stock: failures are not stored in a batch
        with self._connect() as conn:
            conn = conn.execution_options(isolation_level="READ COMMITTED")
            with conn.begin():
                self._batch.conn = conn
                try:
                    for fast, run in runs_by_path(events):
                        if fast:
                            self._write_asset_events(conn, run)
                        else:
                            for event in run:
                                self.store_event(event)
                finally:
                    self._batch.conn = None

    def _write_asset_events(self, conn: Connection, events: Sequence[EventLogEntry]) -> None:
        inserted = conn.execute(
            SqlEventLogStorageTable.insert().returning(SqlEventLogStorageTable.c.id, sort_by_parameter_order=True),
            [self._event_to_row(event) for event in events],
        )
        event_ids = [int(i) for i in inserted.scalars()]
        if len(event_ids) != len(events):
            raise DagsterInvariantViolationError(f"stored {len(event_ids)} of {len(events)} events")
        self._store_asset_event_tags(conn, events, event_ids)
        for asset_key, values in latest_asset_rows(self, events, event_ids, self.has_secondary_index(ASSET_KEY_INDEX_COLS)).items():
            # The statement stock `_store_asset_event` runs.
            conn.execute(
                postgresql.insert(AssetKeyTable)
                .values(asset_key=asset_key, **values)
                .on_conflict_do_update(index_elements=[AssetKeyTable.c.asset_key], set_=dict(**values))
            )

    def has_table(self, table_name: str) -> bool:
        # The stock answer, once per table that is there (tables are not dropped).
        known = self.__dict__.setdefault("_tables", set())
        if table_name in known:
            return True
        found = super().has_table(table_name)
        if found:
            known.add(table_name)
        return found

