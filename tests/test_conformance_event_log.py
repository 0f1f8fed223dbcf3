"""Dagster's own conformance suite for event log storages (tests/dagster_conformance.py
fetches it from the sdists of the installed releases) against the project's two
storages: the SQLite one of the local default (mce_dagster/instance/local.py's
dagster.yaml) and the PostgreSQL one of the production dagster.yaml.

`MCE_CONFORMANCE_STOCK=1` runs the same suite on Dagster's stock storages beside them,
the comparison `make check-dagster` prints. The PostgreSQL half needs the server of
DAGSTER_PG_HOST/PORT/DB/USER/PASSWORD (`eval "$(make -s services)"`; defaults
127.0.0.1:5432, dagster/dagster/dagster) and works in a schema of its own, dropped at
the end; without it those tests skip, and fail when CI=true."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import dagster as dg
import pytest
import yaml

import dagster_conformance
from conftest import IN_CI, REPO, require
from mce_dagster.instance.local import local_instance_yaml
from mce_dagster.instance.postgres import PooledPostgresEventLogStorage
from mce_dagster.instance.sqlite import PooledSqliteEventLogStorage

try:
    _suite = dagster_conformance.load()
except dagster_conformance.SuiteUnavailable as exc:
    if IN_CI:
        raise
    pytest.skip(f"Dagster's conformance suite is not available: {exc}", allow_module_level=True)

_sqlite = _suite["dagster_tests.storage_tests.test_event_log"]
_postgres = _suite["dagster_postgres_tests.test_event_log"]

STOCK = os.environ.get("MCE_CONFORMANCE_STOCK") == "1"

#: Tests of the suite left out, on stock and on the project's storages alike, and why.
DESELECTED = {
    # Connects as test:test to the database `test` of dagster-postgres' docker-compose
    # fixture, with the stock class named in its config: it reads no project code.
    "test_load_from_config": "needs dagster-postgres' docker-compose database and builds only the stock class",
}


def _deselect(cls: type) -> type:
    """`cls` with the DESELECTED tests left out, and every parametrized test given its
    own parameters."""
    for name in DESELECTED:
        if hasattr(cls, name):
            setattr(cls, name, None)  # pytest collects no attribute that is not a function
    _fresh_cursor_parameters(cls)
    return cls


def _fresh_cursor_parameters(cls: type) -> None:
    """The suite parametrizes `test_get_event_records` with a generator, which the
    first class collected uses up: every later class would get an empty parameter set
    and run nothing. Here each class gets the values afresh."""
    values = getattr(_suite["dagster_tests.storage_tests.utils.event_log_storage"], "cursor_datetime_args", None)
    base = getattr(cls, "test_get_event_records", None)
    if values is None or base is None:
        return

    @pytest.mark.parametrize("cursor_dt", list(values()))
    def test_get_event_records(self, storage, instance, cursor_dt):
        base(self, storage, instance, cursor_dt)

    cls.test_get_event_records = test_get_event_records


@pytest.fixture(autouse=True)
def _defensive_checks(monkeypatch):
    # As dagster_tests' conftest.py sets for the whole of Dagster's own suite.
    monkeypatch.setenv("DAGSTER_RECORD_DEFENSIVE_CHECKS", "true")


# -- SQLite: the local default ------------------------------------------------------------


@contextmanager
def _local_default_instance():
    """An instance configured by the dagster.yaml mce writes for the local default."""
    with tempfile.TemporaryDirectory() as home:
        config = yaml.safe_load(local_instance_yaml(Path(home)))
        with dg.instance_for_test(temp_dir=home, overrides=config) as instance:
            yield instance


@_deselect
class TestProjectSqliteEventLogStorage(_sqlite.TestSqliteEventLogStorage):
    __test__ = True

    @pytest.fixture(name="instance", scope="function")
    def instance(self):
        with _local_default_instance() as instance:
            yield instance

    @pytest.fixture(name="storage", scope="function")
    def event_log_storage(self, instance):
        assert type(instance.event_log_storage) is PooledSqliteEventLogStorage
        yield instance.event_log_storage

    def cmd(self, exceptions, tmpdir_path):
        # Stock's opens the stock class on the folder from another process.
        try:
            PooledSqliteEventLogStorage(tmpdir_path).get_logs_for_run("foo")
        except Exception as exc:
            exceptions.put(exc)


if STOCK:

    @_deselect
    class TestStockSqliteEventLogStorage(_sqlite.TestSqliteEventLogStorage):
        __test__ = True


# -- PostgreSQL: the production dagster.yaml ------------------------------------------------

PG_DEFAULTS = {
    "DAGSTER_PG_HOST": "127.0.0.1",
    "DAGSTER_PG_PORT": "5432",
    "DAGSTER_PG_DB": "dagster",
    "DAGSTER_PG_USER": "dagster",
    "DAGSTER_PG_PASSWORD": "dagster",
}


@pytest.fixture(scope="module")
def _pg_schema():
    """A schema of this run's own, the search path of every connection the suite opens."""
    import psycopg2

    env = {k: os.environ.get(k) or v for k, v in PG_DEFAULTS.items()}
    try:
        conn = psycopg2.connect(
            host=env["DAGSTER_PG_HOST"], port=env["DAGSTER_PG_PORT"], dbname=env["DAGSTER_PG_DB"],
            user=env["DAGSTER_PG_USER"], password=env["DAGSTER_PG_PASSWORD"], connect_timeout=3,
        )
    except psycopg2.OperationalError as exc:
        require(False, f"no PostgreSQL at {env['DAGSTER_PG_HOST']}:{env['DAGSTER_PG_PORT']} ({str(exc).strip()}); "
                       'start it with `eval "$(make -s services)"`')
    conn.autocommit = True
    schema = f"mce_conformance_{os.getpid()}"
    with conn.cursor() as cur:
        cur.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")
    yield env, schema
    with conn.cursor() as cur:
        cur.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    conn.close()


@pytest.fixture
def conn_string(_pg_schema):
    env, schema = _pg_schema
    user, password = quote(env["DAGSTER_PG_USER"], safe=""), quote(env["DAGSTER_PG_PASSWORD"], safe="")
    return (
        f"postgresql://{user}:{password}@{env['DAGSTER_PG_HOST']}:{env['DAGSTER_PG_PORT']}/{env['DAGSTER_PG_DB']}"
        f"?options={quote(f'-csearch_path={schema}', safe='')}"
    )


@pytest.fixture
def hostname(_pg_schema):
    return _pg_schema[0]["DAGSTER_PG_HOST"]


def _production_storages(conn_string: str) -> dict:
    """The storages of the production dagster.yaml, each on `conn_string`. Only those:
    its other settings (a default pool limit, the run queue) change what the suite's
    instance answers, as they would stock's."""
    config = yaml.safe_load((REPO / "dagster.yaml").read_text())
    return {
        name: {**config[name], "config": {"postgres_url": conn_string}}
        for name in ("run_storage", "event_log_storage", "schedule_storage")
    }


def _clean_project_storage(conn_string: str) -> PooledPostgresEventLogStorage:
    from dagster_postgres.event_log import PostgresEventLogStorage

    PostgresEventLogStorage.create_clean_storage(conn_string).dispose()
    return PooledPostgresEventLogStorage(conn_string)


@contextmanager
def _project_clean_storage(conn_string: str):
    storage = _clean_project_storage(conn_string)
    try:
        yield storage
    finally:
        storage.dispose()


@_deselect
class TestProjectPostgresEventLogStorage(_postgres.TestPostgresEventLogStorage):
    __test__ = True

    @pytest.fixture(name="instance", scope="function")
    def instance(self, conn_string):
        _clean_project_storage(conn_string).dispose()
        with dg.instance_for_test(overrides=_production_storages(conn_string)) as instance:
            yield instance

    @pytest.fixture(name="storage", scope="function")
    def event_log_storage(self, instance):
        assert type(instance.event_log_storage) is PooledPostgresEventLogStorage
        yield instance.event_log_storage

    def test_event_log_storage_two_watchers(self, conn_string, monkeypatch):
        monkeypatch.setattr(_postgres, "_clean_storage", _project_clean_storage)
        super().test_event_log_storage_two_watchers(conn_string)


if STOCK:

    @_deselect
    class TestStockPostgresEventLogStorage(_postgres.TestPostgresEventLogStorage):
        __test__ = True


# dagster-postgres' tests outside the class, on the storage `kind` names.
KINDS = ["stock", "project"] if STOCK else ["project"]


@pytest.mark.parametrize("kind", KINDS)
def test_postgres_has_table_returns_connection_to_pool(kind, conn_string, monkeypatch):
    if kind == "project":
        monkeypatch.setattr(_postgres, "_clean_storage", _project_clean_storage)
    _postgres.test_has_table_returns_connection_to_pool(conn_string)


@pytest.mark.parametrize("kind", KINDS)
def test_postgres_all_asset_keys_excludes_wiped_asset_on_legacy_index_path(kind, conn_string, monkeypatch):
    if kind == "project":
        monkeypatch.setattr(_postgres, "_clean_storage", _project_clean_storage)
    _postgres.test_all_asset_keys_excludes_wiped_asset_on_legacy_index_path(conn_string)
