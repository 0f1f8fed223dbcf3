"""Benchmark: from a session's announcement to its results in the graph, through the
queue sensor and `dagster-daemon`, on the services of `make services`; and sessions per
second of the Neo4j backend against the embedded FalkorDB on the same batch.

    eval "$(make -s services)"
    .venv/bin/python bench/latency.py [--sessions 500] [--batch 500] [--seed 1]
    .venv/bin/python bench/latency.py --rates 0.5,2,10 [--duration 60]   (steady streams only)

1. Latency. `--sessions` synthetic sessions go into Neo4j (`mce ingest`), then are
   announced in one burst on a queue of the bench's own. `dagster sensor start
   session_queue_sensor` and `dagster-daemon run -w workspace.yaml` run with the
   repository's dagster.yaml in DAGSTER_HOME (PostgreSQL, a schema of the bench's own)
   and the production defaults otherwise. A session's latency runs from its message's
   publication (confirmed by the broker) to the last of its results written: the
   latest `computedAt` of its MetricResult nodes, which the run worker stamps as it
   writes them (one clock: everything runs on this machine).
   With `--rates`, steady streams instead: for each rate, one announcement every
   1/rate seconds for `--duration` seconds (sessions ingested beforehand), the
   stream drained before the next rate. Each session's latency is split by the run
   that wrote its results (its `runId`): publication -> run created (sensor tick and,
   for an asset backfill, the backfill daemon), created -> started (the run queue and
   the launcher), started -> first step (the run worker's start-up), first step ->
   last result (the run itself).
2. Backends. One export of `--batch` sessions, `mce ingest` then `mce compute` with
   every session id, on Neo4j and on the embedded FalkorDB (a private MCE_HOME), each
   on a PostgreSQL instance of its own schema.

Removes what it created: its sessions in Neo4j, its schemas and queues, its folders.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import bench_pg  # beside this file
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
BIN = Path(sys.executable).parent
NEEDED = ("NEO4J_URI", "NEO4J_PASSWORD", "RABBITMQ_URL", "DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_DB", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD")
GRAPH_SELECTING = ("NEO4J_URI", "KG_DB_HOST")
SENSOR = "session_queue_sensor"


# -- the bench's own resources, all removed at the end --------------------------------


@dataclass
class Scratch:
    root: Path
    schemas: list[str] = field(default_factory=list)
    queues: list[str] = field(default_factory=list)
    neo4j_sessions: list[str] = field(default_factory=list)
    daemons: list[subprocess.Popen] = field(default_factory=list)
    embedded_homes: list[Path] = field(default_factory=list)


@contextmanager
def scratch() -> Iterator[Scratch]:
    s = Scratch(Path(tempfile.mkdtemp(prefix="mce-latency-")))
    try:
        yield s
    finally:
        _clean(s)


def _clean(s: Scratch) -> None:
    for daemon in s.daemons:
        stop_daemon(daemon)
    from mce_dagster import queue as q
    from mce_dagster.graph import open_graph

    if s.neo4j_sessions:
        open_graph(neo4j_settings()).delete_sessions(s.neo4j_sessions)
    if s.queues:
        connection = q.connect()
        ch = connection.channel()
        for name in s.queues:
            ch.queue_delete(name)
            ch.queue_delete(q.dlq_name(name))
        connection.close()
    with bench_pg.connect() as conn, conn.cursor() as cur:
        for schema in s.schemas:
            cur.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    for home in s.embedded_homes:
        subprocess.run([str(BIN / "mce"), "kg", "stop"], env={**embedded_env(), "MCE_HOME": str(home)}, capture_output=True)
    shutil.rmtree(s.root, ignore_errors=True)


def neo4j_settings():
    from mce_dagster.settings import Settings

    return Settings.from_env(os.environ)


def embedded_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in GRAPH_SELECTING}


def deployment(s: Scratch, name: str, base: dict[str, str]) -> dict[str, str]:
    """A DAGSTER_HOME holding the repository's dagster.yaml, in a schema of its own
    (PGOPTIONS sets the search path, so the file is used as it is)."""
    schema = f"mce_latency_{uuid.uuid4().hex[:8]}"
    with bench_pg.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE SCHEMA {schema}")
    s.schemas.append(schema)
    home = s.root / name / "dagster"
    home.mkdir(parents=True)
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    return {
        **base,
        "PGOPTIONS": f"-csearch_path={schema}",
        "DAGSTER_HOME": str(home),
        "MCE_HOME": str(s.root / name / "mce"),
        "DAGSTER_EVENT_BATCH_SIZE": "1000",
        "MODEL_PRICES_REFRESH": "false",
    }


def instance_view(env: dict[str, str]):
    """This process's view of a deployment's instance (its own DAGSTER_HOME copy with
    the schema written in, so this process's environment stays as it is)."""
    import dagster as dg
    import yaml

    schema = env["PGOPTIONS"].split("=", 1)[1]
    config = yaml.safe_load((REPO / "dagster.yaml").read_text())
    db = {
        "hostname": env["DAGSTER_PG_HOST"], "port": int(env["DAGSTER_PG_PORT"]), "db_name": env["DAGSTER_PG_DB"],
        "username": env["DAGSTER_PG_USER"], "password": env["DAGSTER_PG_PASSWORD"],
        "params": {"options": f"-csearch_path={schema}"},
    }
    for name in ("run_storage", "event_log_storage", "schedule_storage"):
        config[name]["config"] = {"postgres_db": db}
    home = Path(env["DAGSTER_HOME"]).parent / "view"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    return dg.DagsterInstance.from_config(str(home))


# -- processes --------------------------------------------------------------------------


def cli(env: dict[str, str], *args: str) -> tuple[float, str]:
    """Runs one of the venv's commands from the repository; (seconds, its output)."""
    started = time.perf_counter()
    done = subprocess.run([str(BIN / args[0]), *args[1:]], cwd=REPO, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args[:3])} ... exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return elapsed, done.stdout.strip()


def start_daemon(s: Scratch, env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        daemon = subprocess.Popen(
            [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    s.daemons.append(daemon)
    return daemon


def stop_daemon(daemon: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(daemon.pid, sig)
        except ProcessLookupError:
            return
        try:
            daemon.wait(wait)
        except subprocess.TimeoutExpired:
            pass


def wait_for(condition, timeout: float, what: str, poll: float = 1.0):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what} after {timeout:.0f} s")
        time.sleep(poll)


def synth(path: Path, n: int, seed: int) -> list[str]:
    from mce_dagster.synthetic import write_export

    write_export(path, n, seed)
    return sorted({row["SpanAttributes"]["session.id"] for row in json.loads(path.read_text())})


# -- 1. latency through the sensor and the daemon ---------------------------------------


@dataclass
class Latency:
    sessions: int
    ingest_s: float
    latencies: list[float]
    first_result_s: float
    last_result_s: float
    runs: int
    publish_s: float
    #: the first run's start and the last run's end, from the burst's start
    run_span_s: tuple[float, float]


def measure_latency(s: Scratch, n: int, seed: int, timeout: float) -> Latency:
    from mce_dagster import queue as q
    from mce_dagster.graph import open_graph
    from mce_dagster.settings import Settings

    env = deployment(s, "latency", dict(os.environ))
    queue = f"bench_latency_{uuid.uuid4().hex[:8]}"
    env["MCE_SESSION_QUEUE"] = queue
    s.queues.append(queue)
    export = s.root / "latency.json"
    ids = synth(export, n, seed)
    s.neo4j_sessions.extend(ids)
    ingest_s, _ = cli(env, "mce", "ingest", str(export))
    cli(env, "dagster", "sensor", "start", SENSOR, "-w", "workspace.yaml")
    log = s.root / "latency" / "daemon.log"
    daemon = start_daemon(s, env, log)
    # Measured from a running sensor, not from the daemon's start.
    wait_for(lambda: f"Checking for new runs for sensor: {SENSOR}" in log.read_text(errors="replace"), 300, "the sensor's first tick")

    settings = Settings.from_env(env)
    published: dict[str, float] = {}
    burst_start = time.time()
    with q.channel(settings) as ch:
        for sid in ids:
            q.publish(ch, queue, q.announcement(sid))
            published[sid] = time.time()
    publish_s = time.time() - burst_start

    graph = open_graph(neo4j_settings())
    instance = instance_view(env)
    last_at = _wait_for_results(graph, instance, ids, timeout)
    stop_daemon(daemon)
    latencies = sorted(last_at[sid] - published[sid] for sid in ids)
    records = instance.get_run_records()
    span = (min(r.start_time for r in records) - burst_start, max(r.end_time for r in records) - burst_start)
    instance.dispose()
    return Latency(
        sessions=n, ingest_s=ingest_s, latencies=latencies, first_result_s=min(last_at.values()) - burst_start,
        last_result_s=max(last_at.values()) - burst_start, runs=len(records), publish_s=publish_s, run_span_s=span,
    )


_LAST_RESULT = (
    "MATCH (x:MetricResult) WHERE x.sessionId IN $ids "
    "RETURN x.sessionId AS s, count(x) AS n, max(x.computedAt) AS at"
)


def _wait_for_results(graph, instance, ids: list[str], timeout: float) -> dict[str, float]:
    """Session -> when its last result was written, once every run is over and every
    session has results."""
    from dagster._core.storage.dagster_run import NOT_FINISHED_STATUSES
    import dagster as dg

    def done():
        if instance.get_runs(filters=dg.RunsFilter(statuses=list(NOT_FINISHED_STATUSES)), limit=1):
            return None
        rows = graph.backend.query(_LAST_RESULT, {"ids": ids})
        found = {r["s"]: float(r["at"]) for r in rows if r["n"]}
        return found if len(found) == len(ids) else None

    return wait_for(done, timeout, "every session's results", poll=2.0)


@dataclass
class Stream:
    rate: float
    latencies: list[float]
    #: per session: (tick and backfill, queue and launch, worker start-up, run)
    parts: list[tuple[float, float, float, float]]
    runs: int


def measure_streams(s: Scratch, rates: list[float], duration: float, seed: int, timeout: float) -> list[Stream]:
    from mce_dagster import queue as q
    from mce_dagster.graph import open_graph
    from mce_dagster.settings import Settings

    env = deployment(s, "streams", dict(os.environ))
    queue = f"bench_latency_{uuid.uuid4().hex[:8]}"
    env["MCE_SESSION_QUEUE"] = queue
    s.queues.append(queue)
    counts = [max(1, round(rate * duration)) for rate in rates]
    export = s.root / "streams.json"
    ids = synth(export, sum(counts), seed)
    s.neo4j_sessions.extend(ids)
    cli(env, "mce", "ingest", str(export))
    cli(env, "dagster", "sensor", "start", SENSOR, "-w", "workspace.yaml")
    log = s.root / "streams" / "daemon.log"
    daemon = start_daemon(s, env, log)
    wait_for(lambda: f"Checking for new runs for sensor: {SENSOR}" in log.read_text(errors="replace"), 300, "the sensor's first tick")
    settings = Settings.from_env(env)
    graph = open_graph(neo4j_settings())
    instance = instance_view(env)
    streams, start = [], 0
    for rate, n in zip(rates, counts):
        chosen, start = ids[start:start + n], start + n
        published: dict[str, float] = {}
        began = time.time()
        with q.channel(settings) as ch:
            for i, sid in enumerate(chosen):
                time.sleep(max(0.0, began + i / rate - time.time()))
                q.publish(ch, queue, q.announcement(sid))
                published[sid] = time.time()
        last_at = _wait_for_results(graph, instance, chosen, timeout)
        streams.append(_stream(rate, chosen, published, last_at, graph, instance))
    stop_daemon(daemon)
    instance.dispose()
    return streams


_RUN_OF_SESSION = (
    "MATCH (x:MetricResult) WHERE x.sessionId IN $ids "
    "WITH x.sessionId AS s, x ORDER BY x.computedAt DESC RETURN s, collect(x.runId)[0] AS run"
)


def _stream(rate, ids, published, last_at, graph, instance) -> Stream:
    import dagster as dg

    run_of = {r["s"]: r["run"] for r in graph.backend.query(_RUN_OF_SESSION, {"ids": ids})}
    records = {r.dagster_run.run_id: r for r in instance.get_run_records(filters=dg.RunsFilter(run_ids=sorted(set(run_of.values()))))}
    first_step: dict[str, float] = {}
    for run_id in records:
        steps = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_START, limit=1).records
        if steps:
            first_step[run_id] = steps[0].event_log_entry.timestamp
    parts = []
    for sid in ids:
        rec = records.get(run_of.get(sid))
        if rec is None or rec.start_time is None or rec.dagster_run.run_id not in first_step:
            continue
        created = rec.create_timestamp.timestamp()
        step = first_step[rec.dagster_run.run_id]
        parts.append((created - published[sid], rec.start_time - created, step - rec.start_time, last_at[sid] - step))
    return Stream(rate, sorted(last_at[sid] - published[sid] for sid in ids), parts, len(records))


def stream_report(streams: list[Stream], load) -> str:
    lines = [
        f"machine: {os.cpu_count()} cores, load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        f"steady streams through {SENSOR} and dagster-daemon (repository's dagster.yaml on PostgreSQL, Neo4j):",
        f"   {'rate/s':>7} {'sessions':>9} {'runs':>5} {'p50 s':>7} {'p95 s':>7} {'max s':>7}   "
        "median of: tick+backfill / queue+launch / start-up / run (s)",
    ]
    for st in streams:
        lat = st.latencies
        p95 = percentile(lat, 95) if len(lat) > 1 else lat[0]
        med = [statistics.median(p[i] for p in st.parts) if st.parts else float("nan") for i in range(4)]
        lines.append(
            f"   {st.rate:>7g} {len(lat):>9} {st.runs:>5} {statistics.median(lat):>7.1f} {p95:>7.1f} {lat[-1]:>7.1f}   "
            + " / ".join(f"{m:.1f}" for m in med)
        )
    return "\n".join(lines)


# -- 2. backends on the same batch ------------------------------------------------------


@dataclass
class Backend:
    name: str
    ingest_s: float
    compute_s: float
    sessions: int

    @property
    def rate(self) -> float:
        return self.sessions / (self.ingest_s + self.compute_s)


def measure_backend(s: Scratch, name: str, export: Path, ids: list[str]) -> Backend:
    base = dict(os.environ) if name == "Neo4j" else embedded_env()
    env = deployment(s, name.lower().replace(" ", "-"), base)
    if name == "Neo4j":
        s.neo4j_sessions.extend(ids)
    else:
        s.embedded_homes.append(Path(env["MCE_HOME"]))
    ingest_s, _ = cli(env, "mce", "ingest", str(export))
    compute_s, out = cli(env, "mce", "compute", *ids)
    if f"evaluated {len(ids)} session(s)" not in out:
        raise SystemExit(f"mce compute on {name}: {out}")
    return Backend(name, ingest_s, compute_s, len(ids))


# -- report -----------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]


def report(lat: Latency, backends: list[Backend], load: tuple[float, float, float]) -> str:
    med, p95 = statistics.median(lat.latencies), percentile(lat.latencies, 95)
    through = lat.sessions / lat.last_result_s
    lines = [
        f"machine: {os.cpu_count()} cores, load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"Python {sys.version.split()[0]}",
        "",
        f"1. latency: {lat.sessions} sessions in Neo4j (mce ingest: {lat.ingest_s:.1f} s), announced in one burst "
        f"({lat.publish_s:.1f} s to publish), evaluated by {SENSOR} through dagster-daemon "
        f"(repository's dagster.yaml on PostgreSQL, default sensor settings) in {lat.runs} run(s)",
        f"   publication -> last result in the graph: median {med:.1f} s, p95 {p95:.1f} s, "
        f"min {lat.latencies[0]:.1f} s, max {lat.latencies[-1]:.1f} s",
        f"   first session done {lat.first_result_s:.1f} s after the burst began, last {lat.last_result_s:.1f} s: "
        f"{through:.2f} sessions/s through the daemon",
        f"   the run(s) started {lat.run_span_s[0]:.1f} s after the burst began (sensor tick, backfill daemon, "
        f"run queue, run worker start) and ended at {lat.run_span_s[1]:.1f} s",
        "",
        f"2. backends on the same batch of {backends[0].sessions} sessions (mce ingest, then mce compute with every id; "
        "PostgreSQL instance, in-process run):",
        f"   {'backend':<18} {'ingest':>9} {'evaluate':>10} {'total':>9} {'sessions/s':>11}",
    ]
    for b in backends:
        lines.append(
            f"   {b.name:<18} {b.ingest_s:>8.1f}s {b.compute_s:>9.1f}s {b.ingest_s + b.compute_s:>8.1f}s {b.rate:>11.2f}"
        )
    if len(backends) == 2:
        lines.append(f"   Neo4j / embedded: {backends[0].rate / backends[1].rate:.2f}x the sessions per second")
    return "\n".join(lines)


def check_environment() -> None:
    missing = [k for k in NEEDED if not os.environ.get(k)]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}: run `eval \"$(make -s services)\"` first")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=500, help="sessions in the latency burst")
    parser.add_argument("--batch", type=int, default=500, help="sessions in the backend comparison")
    parser.add_argument("--seed", type=int, default=None, help="synthetic seed (default: a fresh one, so ids are new)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for the burst's results")
    parser.add_argument("--rates", help="steady streams at these rates (sessions/s, comma-separated) instead of the burst")
    parser.add_argument("--duration", type=float, default=60, help="seconds each steady stream lasts")
    args = parser.parse_args()
    check_environment()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    load = os.getloadavg()
    if args.rates:
        rates = [float(r) for r in args.rates.split(",")]
        with scratch() as s:
            streams = measure_streams(s, rates, args.duration, seed, args.timeout)
        print(stream_report(streams, load))
        return 0
    with scratch() as s:
        lat = measure_latency(s, args.sessions, seed, args.timeout)
        export = s.root / "batch.json"
        ids = synth(export, args.batch, seed + 1)
        backends = [measure_backend(s, name, export, ids) for name in ("Neo4j", "embedded FalkorDB")]
    print(report(lat, backends, load))
    return 0


if __name__ == "__main__":
    sys.exit(main())
