"""End to end on the real Neo4j, RabbitMQ and PostgreSQL of `make services`, the way a
deployment runs: `mce synth` and `mce ingest` into Neo4j, announcements on the queue,
`dagster sensor start session_queue_sensor` and `dagster-daemon run` as processes,
with the repository's dagster.yaml in DAGSTER_HOME; and the graph faults a run meets.

Everything a test creates is its own: session ids from a fresh seed, a queue named
for the test (MCE_SESSION_QUEUE), a PostgreSQL schema (PGOPTIONS sets the search
path, so dagster.yaml is used as it is), all removed at the end. Graph faults are
real on loopback: a port where nothing listens, or a forwarder to Neo4j that the
test cuts (tests/tcp_proxy.py); the shared Neo4j itself is never stopped.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import dagster as dg
import pytest
import yaml

from conftest import NEO4J_ENV, REPO, require
from tcp_proxy import CuttableProxy

from mce_dagster import queue as q
from mce_dagster.defs.partitions import SESSIONS
from mce_dagster.defs.sensors import QUEUE_SENSOR
from mce_dagster.settings import Settings

pytestmark = pytest.mark.service

BIN = Path(sys.executable).parent
PG_DEFAULTS = {
    "DAGSTER_PG_HOST": "127.0.0.1",
    "DAGSTER_PG_PORT": "5432",
    "DAGSTER_PG_DB": "dagster",
    "DAGSTER_PG_USER": "dagster",
    "DAGSTER_PG_PASSWORD": "dagster",
}
MALFORMED = [b"not json", b'{"session": "no id"}', b'{"session_id": 42}']
# Written for every session: the check that results reached the graph.
SESSION_METRIC = ("Duration", "Session")
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
# A batch of results as written: created on a first evaluation, merged otherwise.
RESULT_WRITE = (b"CREATE (x:MetricResult)", b"MERGE (x:MetricResult")


# -- the services --------------------------------------------------------------------


def _pg_env() -> dict[str, str]:
    return {k: os.environ.get(k) or v for k, v in PG_DEFAULTS.items()}


def _graph_settings() -> Settings:
    return Settings.from_env({**os.environ, **NEO4J_ENV})


@pytest.fixture(scope="module")
def services():
    """The three services answer; skips (fails in CI) with the reason otherwise."""
    import psycopg2

    require("NEO4J_URI" in NEO4J_ENV, 'no Neo4j: NEO4J_URI is not set (run `eval "$(make -s services)"`)')
    try:
        q.connect(Settings.from_env(), timeout=3).close()
    except Exception as exc:
        require(False, f"RabbitMQ does not answer ({exc})")
    pg = _pg_env()
    try:
        psycopg2.connect(
            host=pg["DAGSTER_PG_HOST"], port=pg["DAGSTER_PG_PORT"], dbname=pg["DAGSTER_PG_DB"],
            user=pg["DAGSTER_PG_USER"], password=pg["DAGSTER_PG_PASSWORD"], connect_timeout=3,
        ).close()
    except psycopg2.OperationalError as exc:
        require(False, f"PostgreSQL does not answer ({str(exc).strip()})")
    from mce_dagster.graph import open_graph

    return open_graph(_graph_settings())


@pytest.fixture
def sessions_to_remove(services):
    """Session ids the test puts in Neo4j; deleted with their results after."""
    ids: list[str] = []
    yield ids
    if ids:
        services.delete_sessions(ids)


# -- a deployment: DAGSTER_HOME, a schema, a queue, daemons --------------------------


class Deployment:
    """One Dagster deployment on the services, run through the CLIs."""

    def __init__(self, root: Path, graph_env: dict[str, str]):
        import psycopg2

        self.root = root
        self.home = root / "dagster"
        self.home.mkdir(parents=True)
        shutil.copy(REPO / "dagster.yaml", self.home / "dagster.yaml")
        token = uuid.uuid4().hex[:10]
        self.schema = f"mce_e2e_{token}"
        self.queue = f"test_e2e_{token}"
        pg = _pg_env()
        self._pg = psycopg2.connect(
            host=pg["DAGSTER_PG_HOST"], port=pg["DAGSTER_PG_PORT"], dbname=pg["DAGSTER_PG_DB"],
            user=pg["DAGSTER_PG_USER"], password=pg["DAGSTER_PG_PASSWORD"],
        )
        self._pg.autocommit = True
        with self._pg.cursor() as cur:
            cur.execute(f"CREATE SCHEMA {self.schema}")
        self.env = {
            **os.environ,
            **graph_env,
            **pg,
            "PGOPTIONS": f"-csearch_path={self.schema}",
            "DAGSTER_HOME": str(self.home),
            "MCE_HOME": str(root / "mce"),
            "MCE_SESSION_QUEUE": self.queue,
            "DAGSTER_EVENT_BATCH_SIZE": "1000",
            "MCE_SENSOR_INTERVAL": "2",
            "MODEL_PRICES_REFRESH": "false",
        }
        self.env.pop("LLM_MODEL_NAME", None)
        self.daemons: list[subprocess.Popen] = []
        self._instance: dg.DagsterInstance | None = None

    # processes

    def cli(self, *args: str, timeout: float = 120) -> str:
        return self.finish(self.start(*args), timeout)

    def start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([str(BIN / args[0]), *args[1:]], cwd=REPO, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    @staticmethod
    def finish(process: subprocess.Popen, timeout: float = 120) -> str:
        out, err = process.communicate(timeout=timeout)
        assert process.returncode == 0, f"{' '.join(process.args)} exited {process.returncode}:\n{out[-2000:]}\n{err[-4000:]}"
        return out

    def start_daemon(self) -> subprocess.Popen:
        log = open(self.root / f"daemon-{len(self.daemons) + 1}.log", "w")
        # Its own process group: the code server and run workers it starts are in it.
        daemon = subprocess.Popen(
            [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"],
            cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        log.close()
        self.daemons.append(daemon)
        return daemon

    def kill(self, daemon: subprocess.Popen) -> None:
        """SIGKILL to the daemon and everything it started."""
        _signal_group(daemon, signal.SIGKILL)
        daemon.wait(30)

    def stop_all(self) -> None:
        for daemon in self.daemons:
            if daemon.poll() is None:
                _signal_group(daemon, signal.SIGTERM)
                try:
                    daemon.wait(30)
                except subprocess.TimeoutExpired:
                    pass
            _signal_group(daemon, signal.SIGKILL)  # whatever of the group is left

    def daemon_log(self, lines: int = 60) -> str:
        """The daemons' own lines (the run workers' DEBUG events left out)."""
        out = []
        for path in sorted(self.root.glob("daemon-*.log")):
            kept = [line for line in path.read_text(errors="replace").splitlines() if " - DEBUG - " not in line]
            out.append(f"--- {path.name}\n" + "\n".join(kept[-lines:]))
        return "\n".join(out)

    # the instance, as the daemon sees it

    def instance(self, monkeypatch) -> dg.DagsterInstance:
        if self._instance is None:
            for name in (*PG_DEFAULTS, "PGOPTIONS", "DAGSTER_HOME"):
                monkeypatch.setenv(name, self.env[name])
            self._instance = dg.DagsterInstance.from_config(str(self.home))
        return self._instance

    # the queue

    def publish(self, bodies: Iterable[bytes]) -> None:
        settings = self.settings()
        with q.channel(settings) as ch:
            for body in bodies:
                q.publish(ch, settings.session_queue, body)

    def depth(self, queue: str) -> int:
        with q.channel(self.settings()) as ch:
            return ch.queue_declare(queue, durable=True, passive=True).method.message_count

    def drain(self, queue: str) -> list[tuple[bytes, dict]]:
        out = []
        with q.channel(self.settings()) as ch:
            while True:
                method, props, body = ch.basic_get(queue, auto_ack=True)
                if method is None:
                    return out
                out.append((body, dict(props.headers or {})))

    def settings(self) -> Settings:
        return Settings.from_env(self.env)

    def remove(self) -> None:
        self.stop_all()
        if self._instance is not None:
            self._instance.dispose()
        try:
            connection = q.connect(self.settings())
            ch = connection.channel()
            ch.queue_delete(self.queue)
            ch.queue_delete(q.dlq_name(self.queue))
            connection.close()
        finally:
            with self._pg.cursor() as cur:
                cur.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
            self._pg.close()


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


@pytest.fixture
def deployment(services, tmp_path):
    made: list[Deployment] = []

    def make(graph_env: dict[str, str] | None = None) -> Deployment:
        made.append(Deployment(tmp_path / f"deployment-{len(made)}", graph_env or NEO4J_ENV))
        return made[-1]

    yield make
    for d in made:
        d.remove()


def wait_for(condition: Callable[[], object], timeout: float, what: str, log: Callable[[], str] = lambda: "") -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout:.0f} s\n{log()}")
        time.sleep(1)


# -- what a test checks ---------------------------------------------------------------


def materializations_per_partition(instance: dg.DagsterInstance, key: dg.AssetKey, ids: list[str]) -> Counter:
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key, asset_partitions=ids), limit=10000).records
    return Counter(r.partition_key for r in records)


def results_per_session(graph, ids: list[str]) -> Counter:
    return Counter(r["sessionId"] for r in graph.read_results(ids))


def has_session_metric(graph, ids: list[str]) -> set[str]:
    name, scope = SESSION_METRIC
    return {r["sessionId"] for r in graph.read_results(ids) if r["name"] == name and r["scope"] == scope}


def evaluated_assets() -> list[dg.AssetKey]:
    """What the queue sensor asks for (the definitions as the code server loads them)."""
    from mce_dagster.definitions import defs

    sensor = defs.get_sensor_def(QUEUE_SENSOR)
    return sorted(sensor.asset_selection.resolve(defs.resolve_asset_graph()))


def synthetic_ids(path: Path) -> list[str]:
    return sorted({row["SpanAttributes"]["session.id"] for row in json.loads(path.read_text())})


def unfinished_runs(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    from dagster._core.storage.dagster_run import NOT_FINISHED_STATUSES

    return list(instance.get_runs(filters=dg.RunsFilter(statuses=list(NOT_FINISHED_STATUSES))))


# -- the whole path -------------------------------------------------------------------


def test_announced_sessions_are_evaluated_once_each_through_a_killed_daemon(deployment, services, sessions_to_remove, monkeypatch):
    d = deployment()
    export = d.root / "sessions.json"
    d.cli("mce", "synth", str(export), "--sessions", "24", "--seed", str(random.SystemRandom().randrange(1 << 30)))
    ids = synthetic_ids(export)
    sessions_to_remove.extend(ids)
    assert len(ids) == 24
    sensor_on = d.start("dagster", "sensor", "start", QUEUE_SENSOR, "-w", "workspace.yaml")
    d.cli("mce", "ingest", str(export))
    d.finish(sensor_on)
    # Announced in two waves: duplicates and malformed messages in both.
    rng = random.Random(7)
    first = [q.announcement(i) for i in ids[:12] + ids[:12:3] + ids[:2]] + MALFORMED[:2]
    second = [q.announcement(i) for i in ids[12:] + ids[12::4]] + MALFORMED[2:]
    rng.shuffle(first)
    rng.shuffle(second)
    d.publish(first)
    instance = d.instance(monkeypatch)

    daemon = d.start_daemon()
    killed = wait_for(lambda: run_midway(instance), 150, "a run with a step done", d.daemon_log)
    d.kill(daemon)
    d.publish(second)  # waits in the queue while no daemon runs
    d.start_daemon()

    assets = evaluated_assets()

    def all_done() -> bool:
        if unfinished_runs(instance) or d.depth(d.queue):
            return False
        return all(set(ids) <= set(instance.get_materialized_partitions(key)) for key in assets)

    wait_for(all_done, 240, "every session evaluated", d.daemon_log)

    # One evaluation each: every asset the sensor asks for, once per session; twice
    # only where the kill fell between a step's materializations and its success,
    # which the retry runs again (both recorded, as Dagster records them).
    for key in assets:
        counts = materializations_per_partition(instance, key, ids)
        again = materialized_by_steps_that_never_succeeded(instance, killed.run_id, key)
        assert counts == Counter({i: 1 + (i in again) for i in ids}), f"{key.to_user_string()}: {counts}"
    # The run killed midway failed and its retry finished it.
    assert instance.get_run_by_id(killed.run_id).status == dg.DagsterRunStatus.FAILURE
    retries = [r for r in instance.get_runs() if r.parent_run_id == killed.run_id]
    assert [r.status for r in retries] == [dg.DagsterRunStatus.SUCCESS], d.daemon_log()
    # The results are in the graph, for every session.
    per_session = results_per_session(services, ids)
    assert set(per_session) == set(ids) and min(per_session.values()) >= 20, per_session
    assert has_session_metric(services, ids) == set(ids)
    # The malformed messages are dead letters, with the reason; the queue is empty.
    assert d.depth(d.queue) == 0
    letters = d.drain(q.dlq_name(d.queue))
    assert sorted(body for body, _ in letters) == sorted(MALFORMED)
    assert all(headers[q.REASON].startswith("malformed message") for _, headers in letters)


def test_without_a_judge_model_the_sensors_leave_judged_metrics_out(monkeypatch):
    from mce_dagster.definitions import build_definitions, runtime

    def judged_in_selection() -> set[str]:
        defs = build_definitions(*runtime())
        selected = defs.get_sensor_def(QUEUE_SENSOR).asset_selection.resolve(defs.resolve_asset_graph())
        judged = {str(m.key) for m in runtime()[1].enabled if m.definition.kind == "llm_judge"}
        return judged & {k.to_user_string() for k in selected}

    monkeypatch.delenv("LLM_MODEL_NAME", raising=False)
    assert judged_in_selection() == set()  # as `mce compute` leaves them out
    monkeypatch.setenv("LLM_MODEL_NAME", "openai/gpt-4o-mini")
    assert judged_in_selection()


def materialized_by_steps_that_never_succeeded(instance: dg.DagsterInstance, run_id: str, key: dg.AssetKey) -> set[str]:
    """Partitions of `key` that the run materialized in a step with no STEP_SUCCESS."""
    succeeded = {e.step_key for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)}
    return {
        e.dagster_event.partition
        for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
        if e.dagster_event.asset_key == key and e.step_key not in succeeded
    }


def run_midway(instance: dg.DagsterInstance) -> dg.DagsterRun | None:
    """A started run that has finished a step and not the run."""
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])):
        if instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_SUCCESS):
            return run
    return None


# A run worker that dies right after a step stored its materializations, before the
# step's HANDLED_OUTPUT and STEP_SUCCESS: the moment a SIGKILL of the daemon's group
# can meet in any step.
KILLED_AFTER_MATERIALIZING = textwrap.dedent("""
    import os, signal
    import dagster as dg
    from dagster._core.events import DagsterEvent

    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    DagsterEvent.handled_output = staticmethod(die)

    class Nowhere(dg.IOManager):
        def handle_output(self, context, obj):
            pass

        def load_input(self, context):
            return None

    parts = dg.DynamicPartitionsDefinition(name="sessions")

    @dg.asset(partitions_def=parts, backfill_policy=dg.BackfillPolicy.single_run(), io_manager_key="nowhere")
    def evaluated(context):
        return len(context.partition_keys)

    instance = dg.DagsterInstance.get()
    instance.add_dynamic_partitions("sessions", ["k1", "k2", "k3"])
    dg.materialize([evaluated], instance=instance, resources={"nowhere": Nowhere()},
                   tags={"dagster/asset_partition_range_start": "k1", "dagster/asset_partition_range_end": "k3"})
""")


def test_a_worker_killed_between_a_steps_materializations_and_its_success_leaves_them_as_stock_does(deployment, monkeypatch):
    """What a step stored before its worker died stays stored and visible (the UI,
    sensors and the retry's planning read it), as in dagster-postgres' own storage."""
    stored = {}
    for kind in ("stock", "project"):
        d = deployment()
        if kind == "stock":
            config = yaml.safe_load((d.home / "dagster.yaml").read_text())
            config["event_log_storage"].update(module="dagster_postgres.event_log", **{"class": "PostgresEventLogStorage"})
            (d.home / "dagster.yaml").write_text(yaml.safe_dump(config))
        worker = subprocess.run([sys.executable, "-c", KILLED_AFTER_MATERIALIZING], cwd=REPO, env=d.env, capture_output=True, text=True, timeout=120)
        assert worker.returncode == -signal.SIGKILL, worker.stderr[-3000:]
        instance = d.instance(monkeypatch)
        (run,) = instance.get_runs()
        assert not instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)
        stored[kind] = sorted(r.partition_key for r in instance.fetch_materializations(dg.AssetKey("evaluated"), limit=100).records)
        monkeypatch.undo()
    assert stored == {"stock": ["k1", "k2", "k3"], "project": ["k1", "k2", "k3"]}


# -- graph faults in a run ------------------------------------------------------------


SMALL_SELECTION = ["session_context", "LLMCall/Duration", "LLMCall/TokenCount", "Session/Duration", "Session/AvgLLMCallDuration"]


def _ingest(graph, root: Path, n: int, ids_out: list[str]) -> list[str]:
    from mce_dagster.ingest import ingest_paths
    from mce_dagster.synthetic import write_export

    export = root / "sessions.json"
    write_export(export, n, seed=random.SystemRandom().randrange(1 << 30))
    ids = synthetic_ids(export)
    ids_out.extend(ids)
    ingest_paths([export], graph)
    return ids


def _graph_env(uri: str, **settings: str) -> dict[str, str]:
    return {**NEO4J_ENV, "NEO4J_URI": uri, **settings}


def definitions_on(env: dict[str, str], monkeypatch) -> dg.Definitions:
    """The project's definitions with the graph `env` names (resources are chosen
    from the environment when the definitions are built)."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    from mce_dagster.definitions import build_definitions, runtime

    return build_definitions(*runtime())


def _materialize(env: dict[str, str], ids: list[str], monkeypatch, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    """The selection over these sessions in one run, in this process, on the graph `env` names."""
    defs = definitions_on(env, monkeypatch)
    instance.add_dynamic_partitions(SESSIONS, ids)
    keys = [dg.AssetKey(k.split("/")) for k in SMALL_SELECTION]
    return dg.materialize(
        assets=list(defs.assets or []), selection=keys, resources=defs.resources, instance=instance,
        tags={RANGE_START: ids[0], RANGE_END: ids[-1]}, raise_on_error=False,
    )


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _step_errors(result: dg.ExecuteInProcessResult, event_type: dg.DagsterEventType) -> list[str]:
    out = []
    for event in result.all_events:
        if event.event_type == event_type:
            error = event.event_specific_data.error
            out.append(error.to_string() if error else "")
    return out


def test_an_unreachable_graph_fails_the_run_with_that_reason(services, tmp_path, monkeypatch):
    uri = f"bolt://127.0.0.1:{_dead_port()}"
    env = _graph_env(uri, MCE_GRAPH_RETRIES="1", MCE_GRAPH_RETRY_WAIT_SECONDS="0", NEO4J_RETRY_SECONDS="0")
    with dg.instance_for_test() as instance:
        result = _materialize(env, ["no-such-session-a", "no-such-session-b"], monkeypatch, instance)
    assert not result.success
    (retried,) = _step_errors(result, dg.DagsterEventType.STEP_UP_FOR_RETRY)
    (failed,) = _step_errors(result, dg.DagsterEventType.STEP_FAILURE)
    for message in (retried, failed):
        assert "the graph is unreachable" in message and uri in message, message
    # The CLI says the same, as a one-line error.
    done = subprocess.run(
        [str(BIN / "mce"), "kg", "status"], cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2 and "the graph is unreachable" in done.stderr and uri in done.stderr, done.stderr


def test_a_connection_dropped_during_a_write_leaves_nothing_half_written_and_the_step_is_retried(
    services, sessions_to_remove, tmp_path, monkeypatch
):
    ids = _ingest(services, tmp_path, 4, sessions_to_remove)
    proxy = CuttableProxy(("127.0.0.1", _port(NEO4J_ENV["NEO4J_URI"])))
    seen_in_outage: list[Counter] = []
    # The first write of results is cut before it reaches Neo4j; during the outage the
    # graph (read directly) holds each metric's results whole or not at all.
    proxy.cut_on(RESULT_WRITE, 3.0, then=lambda: seen_in_outage.append(counts_by_metric(services, ids)))
    env = _graph_env(proxy.uri, MCE_GRAPH_RETRIES="6", MCE_GRAPH_RETRY_WAIT_SECONDS="1", NEO4J_RETRY_SECONDS="0.5")
    try:
        with dg.instance_for_test() as instance:
            result = _materialize(env, ids, monkeypatch, instance)
            assert result.success
            for key in SMALL_SELECTION:
                counts = materializations_per_partition(instance, dg.AssetKey(key.split("/")), ids)
                assert counts == Counter({i: 1 for i in ids}), f"{key}: {counts}"
    finally:
        proxy.close()
    assert proxy.cuts == 1
    retried = _step_errors(result, dg.DagsterEventType.STEP_UP_FOR_RETRY)
    assert retried and all("the graph is unreachable" in m for m in retried), retried
    (during,) = seen_in_outage
    after = counts_by_metric(services, ids)
    assert after and all(during.get(k, 0) in (0, n) for k, n in after.items()), (during, after)
    assert sum(during.values()) < sum(after.values())  # the cut write was not there yet
    assert has_session_metric(services, ids) == set(ids)


def counts_by_metric(graph, ids: list[str]) -> Counter:
    return Counter((r["name"], r["scope"]) for r in graph.read_results(ids))


def _port(uri: str) -> int:
    return int(uri.rsplit(":", 1)[1].split("/")[0])


def test_the_daemon_retries_a_run_that_failed_on_a_dropped_graph_connection(
    deployment, services, sessions_to_remove, tmp_path, monkeypatch
):
    ids = _ingest(services, tmp_path, 3, sessions_to_remove)
    proxy = CuttableProxy(("127.0.0.1", _port(NEO4J_ENV["NEO4J_URI"])))
    # No step retries: the dropped connection fails the run, and dagster.yaml's run
    # retries are what brings it back.
    graph_env = _graph_env(proxy.uri, MCE_GRAPH_RETRIES="0", NEO4J_RETRY_SECONDS="1")
    d = deployment(graph_env)
    try:
        instance = d.instance(monkeypatch)
        instance.add_dynamic_partitions(SESSIONS, ids)
        proxy.cut_on(RESULT_WRITE, 4.0)
        d.start_daemon()
        keys = [dg.AssetKey(k.split("/")) for k in SMALL_SELECTION]
        first = submit_to_queue(instance, ids, keys, definitions_on(graph_env, monkeypatch))

        def settled() -> list[dg.DagsterRun] | None:
            runs = instance.get_runs()
            return runs if any(r.status == dg.DagsterRunStatus.SUCCESS for r in runs) and not unfinished_runs(instance) else None

        runs = wait_for(settled, 150, "the retried run to succeed", d.daemon_log)
    finally:
        proxy.close()
    assert proxy.cuts == 1
    assert instance.get_run_by_id(first.run_id).status == dg.DagsterRunStatus.FAILURE
    failures = [e.dagster_event.event_specific_data.error.to_string() for e in instance.all_logs(first.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)]
    assert failures and all("the graph is unreachable" in f for f in failures), failures
    (retry,) = [r for r in runs if r.parent_run_id == first.run_id]
    assert retry.status == dg.DagsterRunStatus.SUCCESS and retry.tags.get("dagster/retry_number") == "1", run_errors(instance, retry)
    for key in SMALL_SELECTION:
        counts = materializations_per_partition(instance, dg.AssetKey(key.split("/")), ids)
        assert counts == Counter({i: 1 for i in ids}), f"{key}: {counts}"
    assert has_session_metric(services, ids) == set(ids)


def run_errors(instance: dg.DagsterInstance, run: dg.DagsterRun) -> list[str]:
    """Why a run failed, for an assertion's message."""
    out = []
    for entry in instance.all_logs(run.run_id):
        event = entry.dagster_event
        if event is not None and event.event_type in (dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE, dg.DagsterEventType.ENGINE_EVENT):
            error = getattr(event.event_specific_data, "error", None)
            out.append(f"{event.event_type_value}: {event.message} {error.to_string() if error else ''}"[:3000])
    return out


def submit_to_queue(instance: dg.DagsterInstance, ids: list[str], keys: list[dg.AssetKey], defs: dg.Definitions) -> dg.DagsterRun:
    """A run of these assets over these sessions, queued for the daemon as `dagster job
    launch -w workspace.yaml` queues one: its origin is workspace.yaml's code location,
    which the daemon serves and launches it from (and retries it from)."""
    from dagster._core.definitions.reconstruct import ReconstructableRepository
    from dagster._core.remote_origin import RemoteJobOrigin, RemoteRepositoryOrigin
    from dagster._core.workspace.load import location_origins_from_yaml_paths

    (location,) = location_origins_from_yaml_paths([str(REPO / "workspace.yaml")])
    job = "__ASSET_JOB"
    recon = ReconstructableRepository.for_module("mce_dagster.definitions", "defs").get_reconstructable_job(job)
    run = instance.create_run_for_job(
        job_def=defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=set(keys)),
        tags={RANGE_START: ids[0], RANGE_END: ids[-1]},
        asset_selection=frozenset(keys),
        job_code_origin=recon.get_subset(asset_selection=set(keys)).get_python_origin(),
        remote_job_origin=RemoteJobOrigin(RemoteRepositoryOrigin(location, "__repository__"), job),
        status=dg.DagsterRunStatus.NOT_STARTED,
    )
    return instance.submit_run(run.run_id, workspace=None)
