"""The production dagster.yaml, and the project's PostgreSQL event log
(mce_dagster.instance.postgres) against dagster-postgres' stock one on a real server.

PostgreSQL comes from DAGSTER_PG_HOST/PORT/DB/USER/PASSWORD (`eval "$(make -s
services)"` exports them; defaults 127.0.0.1:5432, dagster/dagster/dagster). Each test
run works in schemas of its own, dropped at the end. Without a server the tests skip,
and fail when CI=true."""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import dagster as dg
import pytest
import yaml

from conftest import REPO, require
from mce_dagster.instance.launcher import MonitoredRunLauncher
from test_instance_sqlite import GOOD, QUIET, event_batches, play_trivial, span  # noqa: F401 (event_batches: autouse fixture)

ENV = {
    "DAGSTER_PG_HOST": "127.0.0.1",
    "DAGSTER_PG_PORT": "5432",
    "DAGSTER_PG_DB": "dagster",
    "DAGSTER_PG_USER": "dagster",
    "DAGSTER_PG_PASSWORD": "dagster",
}


def pg_env() -> dict[str, str]:
    return {k: os.environ.get(k) or v for k, v in ENV.items()}


def test_the_production_dagster_yaml_names_the_project_classes(tmp_path, monkeypatch):
    from dagster._core.instance.ref import InstanceRef
    from dagster._core.launcher import RunLauncher

    for name, value in pg_env().items():
        monkeypatch.setenv(name, value)
    (tmp_path / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
    ref = InstanceRef.from_dir(str(tmp_path))
    storages = yaml.safe_load(ref.storage_data.config_yaml)
    assert storages["event_log_storage"]["class_name"] == "PooledPostgresEventLogStorage"
    assert storages["run_storage"]["class_name"] == "PostgresRunStorage"
    assert storages["schedule_storage"]["class_name"] == "PostgresScheduleStorage"
    assert isinstance(ref.run_launcher_data.rehydrate(RunLauncher), MonitoredRunLauncher)
    assert ref.settings["run_monitoring"]["enabled"] is True
    assert ref.settings["run_monitoring"]["max_resume_run_attempts"] == 0


@pytest.fixture(scope="module")
def postgres():
    import psycopg2

    env = pg_env()
    try:
        conn = psycopg2.connect(
            host=env["DAGSTER_PG_HOST"], port=env["DAGSTER_PG_PORT"], dbname=env["DAGSTER_PG_DB"],
            user=env["DAGSTER_PG_USER"], password=env["DAGSTER_PG_PASSWORD"], connect_timeout=3,
        )
    except psycopg2.OperationalError as exc:
        require(False, f"no PostgreSQL at {env['DAGSTER_PG_HOST']}:{env['DAGSTER_PG_PORT']} ({str(exc).strip()}); "
                       'start it with `eval "$(make -s services)"`')
    conn.autocommit = True
    schemas = []

    def schema(name: str) -> str:
        full = f"mce_test_{name}_{os.getpid()}"
        with conn.cursor() as cur:
            cur.execute(f"DROP SCHEMA IF EXISTS {full} CASCADE; CREATE SCHEMA {full}")
        schemas.append(full)
        return full

    yield env, schema, conn
    with conn.cursor() as cur:
        for name in schemas:
            cur.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
    conn.close()


def open_pg_instance(home: Path, env: dict[str, str], schema: str, kind: str) -> dg.DagsterInstance:
    """The production dagster.yaml, in a schema of its own; `stock` swaps in
    dagster-postgres' event log."""
    config = yaml.safe_load((REPO / "dagster.yaml").read_text())
    db_config = {
        "hostname": env["DAGSTER_PG_HOST"], "port": int(env["DAGSTER_PG_PORT"]), "db_name": env["DAGSTER_PG_DB"],
        "username": env["DAGSTER_PG_USER"], "password": env["DAGSTER_PG_PASSWORD"],
        "params": {"options": f"-csearch_path={schema}"},
    }
    for name in ("run_storage", "event_log_storage", "schedule_storage"):
        config[name]["config"] = {"postgres_db": db_config}
    if kind == "stock":
        config["event_log_storage"].update(module="dagster_postgres.event_log", **{"class": "PostgresEventLogStorage"})
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    return dg.DagsterInstance.from_config(str(home))


def test_partition_status_runs_and_lineage_match_stock_postgres(postgres, tmp_path):
    from dagster_postgres.event_log import PostgresEventLogStorage

    from mce_dagster.instance.postgres import PooledPostgresEventLogStorage

    env, schema, _ = postgres
    seen = {}
    for kind in ("stock", "project"):
        instance = open_pg_instance(tmp_path / kind, env, schema(kind), kind)
        expected = PooledPostgresEventLogStorage if kind == "project" else PostgresEventLogStorage
        assert type(instance.event_log_storage) is expected
        seen[kind] = play_trivial(instance)
        instance.dispose()
    for step, (ours, theirs) in enumerate(zip(seen["project"], seen["stock"])):
        assert ours[0] == theirs[0], f"instance answers differ after step {step}"
        assert ours[1] == theirs[1], f"GraphQL answers differ after step {step}"
    after_failing = seen["project"][1][0]
    assert after_failing["assets"]["a2"]["cache"]["failed"] == ["s06", "s07-fail"]
    assert seen["project"][3][0]["assets"]["a0"]["cache"]["failed"] == ["s08", "s09"]


def test_a_batch_that_fails_halfway_is_written_once_in_postgres(postgres, tmp_path, capfd, monkeypatch):
    import bookkeeping_assets as trivial

    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "1000")
    env, schema, conn = postgres
    name = schema("refuse")
    instance = open_pg_instance(tmp_path, env, name, "project")
    # A sequence moves on when its transaction rolls back: the refusal happens once.
    with conn.cursor() as cur:
        cur.execute(f"""
            CREATE SEQUENCE {name}.refusals;
            CREATE FUNCTION {name}.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF NEW.dagster_event_type = 'ASSET_MATERIALIZATION' AND NEW.asset_key = '["a1"]'
                 AND NEW.partition = 's03' AND nextval('{name}.refusals') = 1 THEN
                RAISE EXCEPTION 'refused';
              END IF;
              RETURN NEW;
            END $$;
            CREATE TRIGGER refuse BEFORE INSERT ON {name}.event_logs FOR EACH ROW EXECUTE FUNCTION {name}.refuse();
        """)
    instance.add_dynamic_partitions("sessions", GOOD)
    result = trivial.defs.resolve_job_def(trivial.JOB).execute_in_process(instance=instance, tags=span(GOOD), run_config=QUIET)
    assert result.success
    assert "Exception while storing event batch" in capfd.readouterr().err
    with conn.cursor() as cur:
        cur.execute(f"SELECT last_value FROM {name}.refusals")
        assert cur.fetchone()[0] >= 2  # refused once, then let through by the fallback
    materialized = [r.partition_key for r in instance.fetch_materializations(dg.AssetKey("a1"), limit=1000).records]
    assert sorted(materialized) == GOOD
    assert sorted(instance.get_materialized_partitions(dg.AssetKey("a1"))) == GOOD
    instance.dispose()


def test_the_private_dagster_postgres_parts_it_rests_on():
    import dagster_postgres
    from dagster_postgres.event_log import PostgresEventLogStorage

    assert dagster_postgres.__version__ == "0.29.27"
    assert list(inspect.signature(PostgresEventLogStorage._connect).parameters) == ["self"]
    init = inspect.getsource(PostgresEventLogStorage.__init__)
    assert "self._engine = create_pg_engine(" in init and "self._token_provider = token_provider" in init
    store = inspect.getsource(PostgresEventLogStorage.store_event)
    assert "with self._connect() as conn" in store and "self.index_transaction()" in store
    assert "self._connect()" in inspect.getsource(PostgresEventLogStorage.index_connection)
