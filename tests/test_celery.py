"""The evaluate job on Celery (mce_dagster.definitions_celery): two real Celery workers,
started as production starts them (`dagster-celery worker start -y deploy/celery.yaml`),
take its steps from the RabbitMQ of `make services`, on a batch of synthetic sessions.
The results in the graph equal those of the in-process run of the same job.

Workers reach what the run reaches: the embedded FalkorDB server of the module's
MCE_HOME (one server per MCE_HOME, shared over its Unix socket) and the instance of
deploy/dagster.yaml on the PostgreSQL of `make services` (passed to them with each
step). Without RabbitMQ or PostgreSQL the test skips, and fails when CI=true."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import dagster as dg
import pytest
import yaml

from conftest import REPO, require
from mce_dagster.graph import cypher
from mce_dagster.evaluation import QUIET_RUN_CONFIG, RANGE_END, RANGE_START

BIN = Path(sys.executable).parent
SESSIONS = 4
WORKERS = ("mce-test-celery-1", "mce-test-celery-2")
PG_DEFAULTS = {
    "DAGSTER_PG_HOST": "127.0.0.1",
    "DAGSTER_PG_PORT": "5432",
    "DAGSTER_PG_DB": "dagster",
    "DAGSTER_PG_USER": "dagster",
    "DAGSTER_PG_PASSWORD": "dagster",
}
# Results carry when and in which run they were computed; the rest must be equal.
RUN_FIELDS = {"computedAt", "runId"}


def _broker_url() -> str:
    return os.environ.get("RABBITMQ_URL") or "amqp://guest:guest@127.0.0.1:5672/%2F"


def _celery_app():
    from dagster_celery.executor import CeleryExecutor
    from dagster_celery.make_app import make_app

    return make_app(CeleryExecutor.for_cli(broker=_broker_url()).app_args())


@pytest.fixture(scope="module")
def broker():
    import kombu

    url = _broker_url()
    try:
        with kombu.Connection(url, connect_timeout=3) as conn:
            conn.ensure_connection(max_retries=1)
            # Tasks left by an interrupted run would reach this run's workers.
            if _queue_exists(conn, "dagster"):
                conn.default_channel.queue_purge("dagster")
    except Exception as exc:  # noqa: BLE001 (any reason the broker does not answer)
        require(False, f"no RabbitMQ at {url} ({exc}); start it with `eval \"$(make -s services)\"`")
    return url


def _queue_exists(conn, name: str) -> bool:
    try:
        conn.channel().queue_declare(name, passive=True)
        return True
    except Exception:  # noqa: BLE001 (a passive declare of a missing queue closes the channel)
        return False


@pytest.fixture(scope="module")
def postgres_home(mce_home):
    """A DAGSTER_HOME with deploy/dagster.yaml (the project's PostgreSQL event log) on
    the PostgreSQL of `make services`, in a schema of its own, dropped at the end."""
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
    schema = f"mce_test_celery_{os.getpid()}"
    with conn.cursor() as cur:
        cur.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")
    config = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text())
    for name in ("run_storage", "event_log_storage", "schedule_storage"):
        config[name]["config"]["postgres_db"]["params"] = {"options": f"-csearch_path={schema}"}
    home = mce_home / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    try:
        yield home, env
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.close()


@pytest.fixture(scope="module")
def deployment(mce_home, broker, postgres_home):
    """Two workers, started with the environment the code location has: the instance
    of DAGSTER_HOME, the graph of MCE_HOME, the broker of RABBITMQ_URL."""
    home, pg_env = postgres_home
    variables = {"DAGSTER_HOME": str(home), "DAGSTER_EVENT_BATCH_SIZE": "1000", "RABBITMQ_URL": broker, **pg_env}
    saved = {k: os.environ.get(k) for k in variables}
    os.environ.update(variables)
    # Tables exist before the workers start: two processes that create a new instance's
    # tables at the same moment can both stamp its schema version, and every later open
    # fails ("more than one head"; seen with SQLite).
    dg.DagsterInstance.get().dispose()
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    workers, logs = [], []
    try:
        for name in WORKERS:
            log = (mce_home / f"{name}.log").open("w")
            logs.append(log)
            # Its own session: stopping the worker stops the `celery` process it runs.
            workers.append(subprocess.Popen(
                [str(BIN / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app",
                 "-y", str(REPO / "deploy" / "celery.yaml"), "-n", name, "--loglevel", "WARNING",
                 "-i", "mce_dagster.definitions_celery",
                 "--", "--concurrency=1"],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=mce_home,
            ))
        app = _celery_app()
        deadline = time.monotonic() + 120
        answered: set[str] = set()
        while time.monotonic() < deadline and len(answered) < len(WORKERS):
            answered |= {host.split("@")[0] for reply in app.control.ping(timeout=1) for host in reply}
            dead = [w.args for w in workers if w.poll() is not None]
            assert not dead, f"a worker exited: {dead}; logs under {mce_home}"
        assert answered >= set(WORKERS), f"workers answering after 120 s: {sorted(answered)}"
        yield home
    finally:
        for worker in workers:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
        for log in logs:
            log.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def sessions(kg, mce_home):
    from mce_dagster.ingest import ingest_paths
    from mce_dagster.synthetic import write_export

    path = mce_home / "sessions.json"
    write_export(path, SESSIONS, seed=11)
    report = ingest_paths([path], kg)
    assert len(report.sessions) == SESSIONS
    return sorted(report.sessions)


def _results(kg, ids) -> dict[tuple, dict]:
    return {
        (r["sessionId"], r["scope"], r["name"], r["entityId"]): {k: v for k, v in r.items() if k not in RUN_FIELDS}
        for r in kg.read_results(ids)
    }


def test_celery_workers_evaluate_a_batch_as_the_in_process_run_does(deployment, kg, sessions):
    from dagster._core.definitions.reconstruct import ReconstructableRepository

    from mce_dagster.definitions import defs as in_process_defs
    from mce_dagster.definitions import runtime
    from mce_dagster.defs.jobs import EVALUATE_JOB
    from mce_dagster.evaluation import plan

    # The default metric set as `mce compute` and the sensors run it: without a judge
    # model, judged metrics (and what reads them) are left out.
    _, config = runtime()
    selection = list(plan(config).asset_keys)
    instance = dg.DagsterInstance.get()
    assert type(instance.event_log_storage).__name__ == "PooledPostgresEventLogStorage"
    instance.add_dynamic_partitions("sessions", sessions)
    tags = {RANGE_START: sessions[0], RANGE_END: sessions[-1]}

    # The job as the code location serves it: workers rebuild it from this module.
    job = ReconstructableRepository.for_module("mce_dagster.definitions_celery", "defs", working_directory=str(REPO)).get_reconstructable_job(EVALUATE_JOB)
    started = time.monotonic()
    with warnings.catch_warnings():
        # dagster-celery registers its task again for every step it submits (celery 5.7 warns).
        warnings.filterwarnings("ignore", message="Task name 'execute_plan' is already registered")
        with dg.execute_job(job, instance, tags=tags, run_config=QUIET_RUN_CONFIG, asset_selection=selection) as result:
            assert result.success, [e.message for e in result.all_events if e.is_failure]
            celery_run = result.run_id
    celery_s = time.monotonic() - started

    # Every step ran on a worker, and both workers took steps.
    steps = {
        e.dagster_event.step_key: e.dagster_event.engine_event_data.metadata["Celery worker"].value
        for e in instance.all_logs(celery_run, of_type=dg.DagsterEventType.ENGINE_EVENT)
        if e.dagster_event.engine_event_data and "Celery worker" in e.dagster_event.engine_event_data.metadata
    }
    assert set(steps) == {key.to_python_identifier() for key in selection}
    assert {host.split("@")[0] for host in steps.values()} == set(WORKERS)

    # One materialization per (asset, session), recorded on the shared instance.
    records = instance.fetch_materializations(dg.AssetKey(["Session", "Duration"]), limit=100).records
    assert sorted(r.partition_key for r in records if r.run_id == celery_run) == sessions

    on_celery = _results(kg, sessions)
    assert on_celery and {k[0] for k in on_celery} == set(sessions)
    assert {r["runId"] for r in kg.read_results(sessions)} == {celery_run}

    # The same job in process, on the same sessions, after the Celery run's results are gone.
    kg.backend.query(cypher.DELETE_SESSION_RESULTS, {"ids": sessions})
    assert kg.read_results(sessions) == []
    started = time.monotonic()
    plan = in_process_defs.resolve_job_def(EVALUATE_JOB)
    local = plan.execute_in_process(instance=instance, tags=tags, run_config=QUIET_RUN_CONFIG, asset_selection=selection)
    in_process_s = time.monotonic() - started
    assert local.success

    in_process = _results(kg, sessions)
    assert set(in_process) == set(on_celery)
    different = [k for k in in_process if in_process[k] != on_celery[k]]
    assert not different, f"{len(different)} results differ, e.g. {different[0]}: {on_celery[different[0]]} != {in_process[different[0]]}"
    instance.dispose()
    print(
        f"\n{SESSIONS} sessions, {len(steps)} steps, {len(on_celery)} results: "
        f"Celery (2 workers) {celery_s:.1f} s, in process {in_process_s:.1f} s"
    )
