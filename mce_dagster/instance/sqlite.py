"""Dagster's SQLite event log with pooled connections and one transaction per event batch.

The stock `SqliteEventLogStorage` (dagster 1.13.27) builds a new NullPool engine for
every connection it opens and another for every `has_table`, and has no
`store_event_batch` of its own, so a batch is written event by event. Here each shard
(one SQLite file per run plus the `index` shard) keeps one engine, and a batch is
written in one transaction per shard: asset events with a statement per table, the
same rows stock `store_event` writes; any other event by stock `store_event`, whose
connects join those transactions. Same files, same schema: stock storage reads them.
A write to a run shard ends with a checkpoint, so `<run>.db` changes at each write as
it does under stock storage, and Dagster's watch of a running run (the UI's live log)
sees it.

This rests on private parts of the pinned dagster (`_connect`, `_initdb`,
`_initialized_dbs`, `_event_to_row`, `_get_asset_entry_values`,
`_store_asset_event_tags`, `_has_asset_key_col_on_connection`);
tests/test_instance_sqlite.py checks them against it.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as db
from dagster import DagsterInvariantViolationError, EventLogEntry

# Private: the event log's tables, written directly by a batch.
from dagster._core.storage.event_log.schema import AssetKeyTable, SqlEventLogStorageTable

# Private: the stock SQLite event log, subclassed (`_connect`, `_initdb`,
# `_initialized_dbs`, `_event_to_row`, `_store_asset_event_tags`, `conn_string_for_shard`,
# its watchdog on `<run>.db`), and the name of its index shard.
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME, SqliteEventLogStorage

# Private: Dagster's engine factory and SQLite busy timeout, so a pooled engine is
# configured as stock's per-connection ones.
from dagster._core.storage.sql import create_engine
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS

# Private: the `inst_data` every configurable storage class is built with.
from dagster._serdes import ConfigurableClassData
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Engine

from ..files import keep_private
from .batch import latest_asset_rows, runs_by_path
from .partitions import CachedDynamicPartitions

#: Run shards whose engine stays open: a run writes one; the webserver reads many.
MAX_OPEN_RUN_SHARDS = 8


def _changes(conn: Connection) -> int:
    """Rows this SQLite connection has written since it opened."""
    return conn.connection.driver_connection.total_changes  # type: ignore[union-attr]


def _checkpoint(conn: Connection) -> None:
    """Copy the run shard's committed pages from `<run>.db-wal` into `<run>.db`.

    A run's live log (the webserver's subscription, `instance.watch_event_logs`) is
    Dagster's watchdog on the run shard's main file. Stock storage closes its
    connection after every write, and the last connection to close checkpoints; the
    pooled ones stay open, so without this the main file would change only at
    SQLite's automatic checkpoint (1,000 pages) and a running run's log would stall.
    PASSIVE: no waiting for readers; pages a reader still needs are copied by the
    next write's checkpoint."""
    conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").close()


class PooledSqliteEventLogStorage(CachedDynamicPartitions, SqliteEventLogStorage):
    """`event_log_storage: {module: mce_dagster.instance.sqlite, class:
    PooledSqliteEventLogStorage, config: {base_dir: ...}}` in dagster.yaml."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None):
        # The webserver and the daemon run no code of the project but what the instance's
        # dagster.yaml names: this is where their files (run shards, logs) become owner-only.
        keep_private()
        # Set before the base __init__, which may connect (a new index shard is reindexed).
        self._lock = threading.RLock()
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        # Shard -> the connection this thread holds open on it (inside a batch), so the
        # stock code's own connects join that transaction instead of opening another.
        self._open: dict[str, Connection] = {}
        self._pid = os.getpid()
        self._tables: set[str] = set()
        self._asset_key_cols: set[str] = set()
        super().__init__(base_dir, inst_data)

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None, config_value: Any) -> "PooledSqliteEventLogStorage":
        return cls(inst_data=inst_data, **config_value)

    # -- connections ------------------------------------------------------------

    def _engine(self, shard: str) -> Engine:
        if os.getpid() != self._pid:
            # A forked child must not share the parent's SQLite connections.
            for engine in self._engines.values():
                engine.dispose(close=False)
            self._engines.clear()
            self._pid = os.getpid()
        engine = self._engines.get(shard)
        if engine is None:
            engine = create_engine(
                self.conn_string_for_shard(shard),
                poolclass=db.pool.QueuePool,
                connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
            )
            self._engines[shard] = engine
            self._evict()
        else:
            self._engines.move_to_end(shard)
        if shard not in self._initialized_dbs:
            self._initdb(engine)
            self._initialized_dbs.add(shard)
        return engine

    def _evict(self) -> None:
        runs = [s for s in self._engines if s != INDEX_SHARD_NAME and s not in self._open]
        for shard in runs[: max(0, len(runs) - MAX_OPEN_RUN_SHARDS)]:
            self._engines.pop(shard).dispose()

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:  # type: ignore[override]
        with self._lock:
            joined = self._open.get(shard)
            if joined is not None:
                yield joined
                return
            with self._engine(shard).connect() as conn:
                before = _changes(conn)
                with conn.begin():
                    self._open[shard] = conn
                    try:
                        yield conn
                    finally:
                        del self._open[shard]
                if shard != INDEX_SHARD_NAME and _changes(conn) != before:
                    _checkpoint(conn)

    def has_table(self, table_name: str) -> bool:
        # A table, once there, stays: only positive answers are kept.
        if table_name in self._tables:
            return True
        with self.index_connection() as conn:
            found = bool(conn.dialect.has_table(conn, table_name))
        if found:
            self._tables.add(table_name)
        return found

    def _has_asset_key_col_on_connection(self, conn: Connection, column_name: str) -> bool:
        # The stock code inspects the table for every asset event.
        if column_name not in self._asset_key_cols:
            if not super()._has_asset_key_col_on_connection(conn, column_name):
                return False
            self._asset_key_cols.add(column_name)
        return True

    # -- writing a batch ----------------------------------------------------------

    def _store_asset_event(self, conn: Connection, event: EventLogEntry, event_id: int) -> None:
        # The stock insert-then-update-on-IntegrityError, as one upsert.
        if not (event.dagster_event and event.dagster_event.asset_key):
            return
        values = self._get_asset_entry_values(event, event_id, self._has_asset_key_index_cols_on_connection(conn))
        if values:
            self._upsert_asset_key(conn, event.dagster_event.asset_key.to_string(), values)

    @staticmethod
    def _upsert_asset_key(conn: Connection, asset_key: str, values: dict[str, Any]) -> None:
        conn.execute(
            sqlite_insert(AssetKeyTable)
            .values(asset_key=asset_key, **values)
            .on_conflict_do_update(index_elements=[AssetKeyTable.c.asset_key], set_=values)
        )

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """All of the batch or none of it, so Dagster's one-by-one fallback after a
        failed batch writes nothing twice."""
        run_ids = {event.run_id for event in events}
        if len(run_ids) != 1:
            return super().store_event_batch(events)
        (run_id,) = run_ids
        with self._lock:
            run_engine, index_engine = self._engine(run_id), self._engine(INDEX_SHARD_NAME)
            with run_engine.connect() as run_conn, index_engine.connect() as index_conn:
                run_tx, index_tx = run_conn.begin(), index_conn.begin()
                self._open[run_id], self._open[INDEX_SHARD_NAME] = run_conn, index_conn
                try:
                    # A no-op write takes the shard's write lock, so the rows after
                    # `last` are this batch's.
                    run_conn.execute(SqlEventLogStorageTable.delete().where(db.false()))
                    last = run_conn.execute(db.select(db.func.max(SqlEventLogStorageTable.c.id))).scalar() or 0
                    for fast, run in runs_by_path(events):
                        if fast:
                            self._write_asset_events(run_conn, index_conn, run)
                        else:
                            # Stock code, event by event; its connects join the two transactions.
                            for event in run:
                                self.store_event(event)
                    run_tx.commit()
                except BaseException:
                    if run_tx.is_active:
                        run_tx.rollback()
                    index_tx.rollback()
                    raise
                finally:
                    del self._open[run_id], self._open[INDEX_SHARD_NAME]
                try:
                    index_tx.commit()
                except BaseException:
                    # Two files cannot commit atomically: undo the run shard's half.
                    with self._connect(run_id) as conn:
                        conn.execute(SqlEventLogStorageTable.delete().where(SqlEventLogStorageTable.c.id > last))
                    raise
                _checkpoint(run_conn)

    def _write_asset_events(self, run_conn: Connection, index_conn: Connection, events: Sequence[EventLogEntry]) -> None:
        """What stock `store_event` does for each asset event, a statement per table:
        the row in the run shard, its mirror in the index, the event tags, and the
        asset's row updated as the events in order would have left it."""
        rows = [self._event_to_row(event) for event in events]
        run_conn.execute(SqlEventLogStorageTable.insert(), rows)
        inserted = index_conn.execute(
            SqlEventLogStorageTable.insert().returning(SqlEventLogStorageTable.c.id, sort_by_parameter_order=True),
            rows,
        )
        event_ids = [int(i) for i in inserted.scalars()]
        if len(event_ids) != len(events):
            raise DagsterInvariantViolationError(f"stored {len(event_ids)} of {len(events)} events in the index shard")
        self._store_asset_event_tags(index_conn, events, event_ids)
        rows = latest_asset_rows(self, events, event_ids, self._has_asset_key_index_cols_on_connection(index_conn))
        for asset_key, values in rows.items():
            self._upsert_asset_key(index_conn, asset_key, values)

    # -- files going away -------------------------------------------------------------

    def _close_run_shards(self) -> None:
        with self._lock:
            for shard in [s for s in self._engines if s != INDEX_SHARD_NAME]:
                self._engines.pop(shard).dispose()

    def wipe(self) -> None:
        # Open connections would keep writing to the unlinked files.
        self._close_run_shards()
        super().wipe()

    def upgrade(self) -> None:
        super().upgrade()
        self._tables.clear()
        self._asset_key_cols.clear()

    def dispose(self) -> None:
        super().dispose()
        with self._lock:
            for engine in self._engines.values():
                engine.dispose()
            self._engines.clear()
