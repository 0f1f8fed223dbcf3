"""Benchmark: what Dagster's bookkeeping costs per (asset, partition) on each instance
storage, side by side in one run.

1. Trivial assets (bench/bookkeeping_assets.py: a chain of K assets over N dynamic
   partitions, one run over all of them): the in-memory instance, stock SQLite and the
   project's SQLite event log, each with events written one by one and in batches.
2. The real project: the default job (`mce compute --all`) over synthetic sessions,
   ingested into a private embedded graph, on stock SQLite and on the project's.
3. With --profile, where the project's run spends its time (cProfile).

    .venv/bin/python bench/bookkeeping.py [--partitions 200] [--assets 5] [--repeat 3]
        [--batch-size 1000] [--sessions 200] [--seed 1] [--profile] [--skip-trivial] [--skip-project]
        [--postgres]

Prints tables and writes bench/results/bookkeeping-<N>-<sessions>.json.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
import bench_pg  # noqa: E402  (beside this file)

QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
STORAGES = ("memory", "stock", "project")
#: With --postgres: dagster-postgres' event log and the project's, on the PostgreSQL
#: of DAGSTER_PG_* (make services), each instance in a schema of its own.
PG_STORAGES = ("pg-stock", "pg-project")
_PG_SCHEMAS: list[str] = []


def open_pg_instance(kind: str, home: Path):
    """The repository's production dagster.yaml in a fresh schema; pg-stock swaps in
    dagster-postgres' own event log."""
    import dagster as dg
    import yaml

    schema = f"mce_bench_{os.getpid()}_{len(_PG_SCHEMAS)}"
    with bench_pg.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")
    _PG_SCHEMAS.append(schema)
    env = os.environ
    db = {
        "hostname": env["DAGSTER_PG_HOST"], "port": int(env["DAGSTER_PG_PORT"]), "db_name": env["DAGSTER_PG_DB"],
        "username": env["DAGSTER_PG_USER"], "password": env["DAGSTER_PG_PASSWORD"],
        "params": {"options": f"-csearch_path={schema}"},
    }
    config = yaml.safe_load((REPO / "dagster.yaml").read_text())
    for name in ("run_storage", "event_log_storage", "schedule_storage"):
        config[name]["config"] = {"postgres_db": db}
    if kind == "pg-stock":
        config["event_log_storage"].update(module="dagster_postgres.event_log", **{"class": "PostgresEventLogStorage"})
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    return dg.DagsterInstance.from_config(str(home))


def drop_pg_schemas() -> None:
    if not _PG_SCHEMAS:
        return
    with bench_pg.connect() as conn, conn.cursor() as cur:
        for schema in _PG_SCHEMAS:
            cur.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def open_instance(kind: str, home: Path):
    import dagster as dg

    from mce_dagster.instance.local import write_local_config

    if kind == "memory":
        return dg.DagsterInstance.ephemeral()
    if kind.startswith("pg-"):
        return open_pg_instance(kind, home)
    if kind == "project":
        write_local_config(home)
    else:
        home.mkdir(parents=True, exist_ok=True)
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return dg.DagsterInstance.from_config(str(home))


def set_batch(size: int) -> None:
    if size:
        os.environ["DAGSTER_EVENT_BATCH_SIZE"] = str(size)
    else:
        os.environ.pop("DAGSTER_EVENT_BATCH_SIZE", None)


def trivial_run(kind: str, home: Path, partitions: int, assets: int) -> float:
    """Seconds for one run over every partition of a fresh instance."""
    from bookkeeping_assets import JOB, build_defs

    from mce_dagster.evaluation import RANGE_END, RANGE_START

    instance = open_instance(kind, home)
    keys = [f"session-{i:05d}" for i in range(partitions)]
    instance.add_dynamic_partitions("sessions", keys)
    job = build_defs(assets, fail_at=None).resolve_job_def(JOB)
    started = time.perf_counter()
    result = job.execute_in_process(instance=instance, tags={RANGE_START: keys[0], RANGE_END: keys[-1]}, run_config=QUIET)
    elapsed = time.perf_counter() - started
    assert result.success
    # The answer, not only the speed: every partition of the last asset is materialized.
    import dagster as dg

    assert len(instance.get_materialized_partitions(dg.AssetKey(f"a{assets - 1}"))) == partitions
    instance.dispose()
    return elapsed


def bench_trivial(args, work: Path, out: dict) -> None:
    trivial_run("project", work / "warm", 10, 2)  # imports and first-run costs
    rows = []
    for batch in (0, args.batch_size):
        set_batch(batch)
        for kind in STORAGES + (PG_STORAGES if args.postgres else ()):
            times = [trivial_run(kind, work / f"t-{kind}-{batch}-{r}", args.partitions, args.assets) for r in range(args.repeat)]
            ms = [1000 * t / (args.partitions * args.assets) for t in times]
            rows.append({"storage": kind, "batch_size": batch, "ms_median": statistics.median(ms), "ms_min": min(ms), "run_s": statistics.median(times)})
    out["trivial"] = {"partitions": args.partitions, "assets": args.assets, "repeat": args.repeat, "rows": rows}
    print(f"\n1. trivial assets: {args.partitions} partitions x {args.assets} assets, one run, median of {args.repeat}")
    print(f"   {'storage':<8} {'DAGSTER_EVENT_BATCH_SIZE':>24} {'ms/(asset,partition)':>21} {'min':>6} {'run s':>7}")
    for r in rows:
        print(f"   {r['storage']:<8} {r['batch_size'] or 'unset':>24} {r['ms_median']:>21.2f} {r['ms_min']:>6.2f} {r['run_s']:>7.2f}")


def bench_project(args, work: Path, out: dict) -> None:
    os.environ["MCE_HOME"] = str(work / "mce")
    from mce_dagster.definitions import runtime
    from mce_dagster.graph import open_graph
    from mce_dagster.ingest import ingest_paths
    from mce_dagster.runner import compute_sessions
    from mce_dagster.synthetic import write_export

    _, config = runtime()
    export = work / "sessions.json"
    write_export(export, args.sessions, args.seed)
    kg = open_graph()
    ids = ingest_paths([export], kg).sessions
    assets = len(config.enabled)
    set_batch(args.batch_size)
    rows = []
    profile = None
    for kind in ("stock", "project"):
        instance = open_instance(kind, work / f"p-{kind}")
        profiler = cProfile.Profile() if args.profile and kind == "project" else None
        started = time.perf_counter()
        if profiler:
            profiler.enable()
        outcome = compute_sessions(ids, instance=instance)
        if profiler:
            profiler.disable()
            profile = profiler
        elapsed = time.perf_counter() - started
        assert outcome.success, outcome.failed_runs
        rows.append({
            "storage": kind, "runs": len(outcome.runs), "evaluate_s": elapsed,
            "ms_per_asset_partition": 1000 * elapsed / (assets * len(ids)),
        })
        instance.dispose()
    out["project"] = {"sessions": len(ids), "metric_assets": assets, "batch_size": args.batch_size, "rows": rows}
    print(f"\n2. the default job over {len(ids)} synthetic sessions, {assets} metric assets, DAGSTER_EVENT_BATCH_SIZE={args.batch_size}")
    print(f"   {'storage':<8} {'runs':>5} {'evaluate s':>11} {'ms/(asset,partition)':>21}")
    for r in rows:
        print(f"   {r['storage']:<8} {r['runs']:>5} {r['evaluate_s']:>11.2f} {r['ms_per_asset_partition']:>21.2f}")
    if profile is not None:
        out["profile"] = report_profile(profile, rows[-1]["evaluate_s"])


# Where a run's time goes: (label, file fragment, function) whose cumulative time is
# reported; nested entries are included in their parents'.
BUCKETS = (
    ("run creation + planned events", "run_domain.py", "create_run"),
    ("event storage: store_event", "sqlite_event_log.py", "store_event"),
    ("event storage: store_event_batch", "instance/sqlite.py", "store_event_batch"),
    ("serializing events", "serdes.py", "serialize_value"),
    ("asset code (metric functions)", "core/evaluate.py", "evaluate_metric"),
    ("IO manager: handle_output", "io_managers.py", "handle_output"),
    ("IO manager: load_input", "io_managers.py", "load_input"),
    ("graph: read_contexts", "graph/store.py", "read_contexts"),
    ("graph: write_results", "graph/store.py", "write_results"),
    ("graph: backend query/write (driver)", "graph/neo4j.py", "write"),
    ("session contexts built", "core/context.py", "build"),
    ("partitions registered", "instance.py", "add_dynamic_partitions"),
    ("step events (log_dagster_event)", "log_manager.py", "log_dagster_event"),
    ("partition key lookups", "dynamic.py", "get_partition_keys"),
)


def report_profile(profile: cProfile.Profile, total_s: float) -> dict:
    stats = pstats.Stats(profile)
    found: dict[str, float] = {}
    for (filename, _, name), (_, _, _, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        for label, fragment, function in BUCKETS:
            if name == function and fragment in filename:
                found[label] = found.get(label, 0.0) + cumulative
    print(f"\n3. profile of the project-storage run ({total_s:.2f} s under cProfile, which slows Python code)")
    for label, _, _ in BUCKETS:
        if label in found:
            print(f"   {label:<36} {found[label]:>7.2f} s")
    print("   top 25 by own time:")
    stats.sort_stats("tottime")
    rows = []
    for func in stats.fcn_list[:25]:  # type: ignore[attr-defined]
        _, _, tottime, cumulative, _ = stats.stats[func]  # type: ignore[attr-defined]
        where = f"{Path(func[0]).name}:{func[1]}({func[2]})"
        rows.append((where, tottime, cumulative))
        print(f"   {tottime:>7.2f} s own {cumulative:>7.2f} s cum  {where}")
    return {"buckets_s": found, "top_own_time": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--assets", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=1000, help="DAGSTER_EVENT_BATCH_SIZE for the batched rows")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--skip-trivial", action="store_true")
    parser.add_argument("--skip-project", action="store_true")
    parser.add_argument("--postgres", action="store_true", help="also dagster-postgres and the project's PostgreSQL event log (DAGSTER_PG_*)")
    args = parser.parse_args()
    if args.postgres and not os.environ.get("DAGSTER_PG_HOST"):
        parser.error('--postgres needs DAGSTER_PG_HOST and the rest: eval "$(make -s services)"')

    work = Path(tempfile.mkdtemp(prefix="mce-bk-"))
    os.environ["DAGSTER_HOME"] = str(work / "unused-dagster-home")
    out: dict[str, object] = {"python": platform.python_version(), "cpus": os.cpu_count()}
    try:
        if not args.skip_trivial:
            bench_trivial(args, work, out)
        if not args.skip_project:
            bench_project(args, work, out)
    finally:
        from mce_dagster.graph.embedded import EmbeddedFalkorDB

        EmbeddedFalkorDB(work / "mce").stop()
        shutil.rmtree(work, ignore_errors=True)
        drop_pg_schemas()
    try:
        out["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    results = BENCH / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / f"bookkeeping-{args.partitions}-{args.sessions}.json").write_text(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
