"""Benchmark: ingestion and evaluation of N synthetic sessions against three floors
measured in the same run, on one graph backend and one Dagster instance storage.

    .venv/bin/python bench/scale.py --sessions 10000 --backend neo4j --storage postgres
    .venv/bin/python bench/scale.py --sessions 1000 --backend embedded --storage sqlite

Each phase runs in a process of its own, so its peak memory (max RSS of the Python
process; the graph server is a process apart and not counted) is its own:

- ingest:   `mce ingest`'s code path over the export (sessions/s, peak RSS);
- plain:    the metric functions in plain Python over in-memory sessions, batch by batch
            (the export parsed first, not timed);
- graph:    the graph floor: per batch, the same read query the engine sends, then one
            plain `UNWIND ... CREATE` per metric writing as many result nodes of the same
            shape as the engine writes (scratch nodes, deleted afterwards, not timed);
- dagster:  the Dagster floor: as many (asset, partition) materializations of no-op
            assets as the engine's job has, in runs of the same batch size, on a fresh
            instance of the same storage;
- engine:   the default metric set through Dagster (`mce compute --all`'s code path):
            partitions registered, one run per batch, results written to the graph.

The engine's ratio is engine / (plain + graph + dagster). The judged metrics need a
judge and are left out of every phase alike. With `--backend neo4j` the bench's
sessions and results are deleted from the Neo4j of NEO4J_URI when it ends; with
`--storage postgres` each instance gets a fresh schema in DAGSTER_PG_*'s database.
Writes bench/results/scale-<backend>-<storage>-<N>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

PHASES = ("ingest", "plain", "graph", "dagster", "engine")
FLOOR_LABEL = "BenchFloorResult"  # scratch nodes of the graph floor


def chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def deterministic_metrics():
    """The enabled metrics a run without a judge evaluates: judged metrics and what
    reads them are left out (as `mce compute --all` does without LLM_MODEL_NAME)."""
    from mce_dagster.core.ontology import Scope
    from mce_dagster.definitions import runtime

    _, config = runtime()
    dropped: set = set()
    kept = []
    for m in config.enabled:  # dependencies first
        if m.definition.kind == "llm_judge" or any(d in dropped for d in m.dependencies):
            dropped.add(m.key)
        elif m.scope is not Scope.POPULATION:
            kept.append(m)
    return kept


def session_ids(work: Path) -> list[str]:
    return json.loads((work / "ids.json").read_text())


# ---- phases (each in its own process) -------------------------------------------


def phase_ingest(args, work: Path) -> dict:
    from mce_dagster.graph import open_graph
    from mce_dagster.ingest import ingest_paths

    kg = open_graph()
    started = time.perf_counter()
    report = ingest_paths([work / "sessions.json"], kg)
    elapsed = time.perf_counter() - started
    if len(report.sessions) != args.sessions:
        raise SystemExit(f"ingested {len(report.sessions)} sessions of {args.sessions}: {report.problems[:3]}")
    (work / "ids.json").write_text(json.dumps(report.sessions))
    return {"seconds": elapsed, "sessions_per_s": len(report.sessions) / elapsed}


def phase_plain(args, work: Path) -> dict:
    from mce_dagster.core.evaluate import evaluate_all
    from mce_dagster.ingest import IngestReport, build_graphs, collect_spans
    from mce_dagster.prices import load_price_table

    metrics = deterministic_metrics()
    prices = load_price_table()
    parsed = IngestReport()
    contexts = {g.session_id: g.to_context() for g in build_graphs(collect_spans([work / "sessions.json"], parsed), parsed)}
    ids = session_ids(work)
    seconds = 0.0
    counts = []  # per batch: results per metric, for the graph floor to write as many
    results = 0
    for batch in chunks(ids, args.batch):
        part = {k: contexts[k] for k in batch}
        started = time.perf_counter()
        batches = evaluate_all(metrics, part, prices)
        seconds += time.perf_counter() - started
        counts.append({str(k): b.evaluated for k, b in batches.items()})
        results += sum(b.evaluated for b in batches.values())
    (work / "counts.json").write_text(json.dumps(counts))
    return {"seconds": seconds, "results": results, "metric_assets": len(metrics)}


def _floor_row(i: int, session_id: str, metric: str) -> dict:
    # A row of the shape the engine writes (MetricResultNode.as_row), built by the model.
    from mce_dagster.core.models import MetricResultNode

    return MetricResultNode(
        id=f"{metric}:{session_id}:{i}", name=metric, provider="native", scope="Session",
        entityId=f"{session_id}-{i}", sessionId=session_id, result=float(i % 7), metadata='{"n": 1}',
        evaluationMethod="deterministic", metricVersion=1, computedAt=1.7e12, runId="bench",
    ).as_row()


def phase_graph(args, work: Path) -> dict:
    from mce_dagster.graph import cypher, open_graph

    backend = open_graph().backend
    ids = session_ids(work)
    counts = json.loads((work / "counts.json").read_text())
    read_s = write_s = 0.0
    rows_read = written = 0
    create = f"UNWIND $rows AS r CREATE (x:{FLOOR_LABEL}) SET x = r"
    for batch, per_metric in zip(chunks(ids, args.batch), counts):
        started = time.perf_counter()
        rows_read += len(backend.query(cypher.read_contexts(), {"ids": batch}))
        read_s += time.perf_counter() - started
        for metric, n in per_metric.items():
            if not n:
                continue
            rows = [_floor_row(i, batch[i % len(batch)], metric) for i in range(n)]
            started = time.perf_counter()
            backend.write([(create, {"rows": rows})])
            write_s += time.perf_counter() - started
            written += n
    while backend.query(f"MATCH (x:{FLOOR_LABEL}) WITH x LIMIT 20000 DETACH DELETE x RETURN count(*) AS n")[0]["n"]:
        pass
    return {"seconds": read_s + write_s, "read_s": read_s, "write_s": write_s, "rows_read": rows_read, "written": written}


def _instance(args, work: Path, name: str):
    import bookkeeping

    bookkeeping.set_batch(1000)
    if args.storage == "postgres":
        return bookkeeping.open_pg_instance("pg-project", work / name)
    return bookkeeping.open_instance("project", work / name)


def phase_dagster(args, work: Path) -> dict:
    import bookkeeping
    from bookkeeping_assets import JOB, build_defs

    from mce_dagster.evaluation import RANGE_END, RANGE_START

    assets = len(deterministic_metrics()) + 1  # + the session context asset the metrics read
    ids = session_ids(work)
    instance = _instance(args, work, "dagster-floor")
    job = build_defs(assets, fail_at=None).resolve_job_def(JOB)
    try:
        started = time.perf_counter()
        instance.add_dynamic_partitions("sessions", ids)
        for batch in chunks(ids, args.batch):
            result = job.execute_in_process(
                instance=instance, tags={RANGE_START: batch[0], RANGE_END: batch[-1]}, run_config=bookkeeping.QUIET
            )
            assert result.success
        elapsed = time.perf_counter() - started
    finally:
        instance.dispose()
        bookkeeping.drop_pg_schemas()
    return {"seconds": elapsed, "assets": assets, "ms_per_asset_partition": 1000 * elapsed / (assets * len(ids))}


def phase_engine(args, work: Path) -> dict:
    import bookkeeping

    from mce_dagster.core.ontology import Label
    from mce_dagster.graph import open_graph
    from mce_dagster.runner import compute_sessions

    ids = session_ids(work)
    instance = _instance(args, work, "engine")
    try:
        started = time.perf_counter()
        outcome = compute_sessions(ids, instance=instance, batch_size=args.batch)
        elapsed = time.perf_counter() - started
    finally:
        instance.dispose()
        bookkeeping.drop_pg_schemas()
    if not outcome.success:
        raise SystemExit(f"the engine's runs failed: {outcome.failed_runs} {outcome.failed_entities}")
    backend = open_graph().backend
    count = f"MATCH (x:{Label.METRIC_RESULT}) WHERE x.sessionId IN $ids RETURN count(x) AS n"
    stored = sum(backend.query(count, {"ids": batch})[0]["n"] for batch in chunks(ids, 5000))
    return {"seconds": elapsed, "runs": len(outcome.runs), "stored_results": stored}


# ---- the driver -------------------------------------------------------------------


def run_phase(phase: str, args, work: Path, env: dict) -> dict:
    """One phase in a child process; its result, its wall time and its peak RSS."""
    out = work / f"{phase}.json"
    command = [sys.executable, __file__, "--phase", phase, "--work", str(work),
               "--sessions", str(args.sessions), "--batch", str(args.batch),
               "--backend", args.backend, "--storage", args.storage, *(["--profile"] if args.profile else [])]
    started = time.perf_counter()
    child = subprocess.Popen(command, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"phase {phase} failed (exit {os.waitstatus_to_exitcode(status)})")
    result = json.loads(out.read_text())
    result["peak_rss_mb"] = usage.ru_maxrss / 1024
    result["process_wall_s"] = wall
    print(f"  {phase:<8} {result['seconds']:>9.1f} s   peak RSS {result['peak_rss_mb']:>7.0f} MB", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--batch", type=int, default=500, help="sessions per run and per graph round trip")
    parser.add_argument("--backend", choices=["embedded", "neo4j"], default="embedded")
    parser.add_argument("--storage", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--profile", action="store_true", help="where the engine's run spends its time (cProfile)")
    parser.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.phase:  # a child: one phase, its result in <work>/<phase>.json
        import warnings

        warnings.filterwarnings("ignore", message=".*is currently in beta")
        phase = globals()[f"phase_{args.phase}"]
        if args.profile and args.phase == "engine":
            import cProfile

            import bookkeeping

            profiler = cProfile.Profile()
            result = profiler.runcall(phase, args, args.work)
            result["profile"] = bookkeeping.report_profile(profiler, result["seconds"])
        else:
            result = phase(args, args.work)
        (args.work / f"{args.phase}.json").write_text(json.dumps(result))
        return

    work = Path(tempfile.mkdtemp(prefix="mce-scale-"))
    env = {**os.environ, "MCE_HOME": str(work / "home"), "DAGSTER_HOME": str(work / "dagster"),
           "LLM_MODEL_NAME": "", "MODEL_PRICES_REFRESH": "false"}
    if args.backend == "embedded":
        for name in ("NEO4J_URI", "KG_DB_HOST"):
            env.pop(name, None)
    elif not env.get("NEO4J_URI"):
        raise SystemExit("--backend neo4j needs NEO4J_URI (eval \"$(make -s services)\")")
    if args.storage == "postgres" and not env.get("DAGSTER_PG_HOST"):
        raise SystemExit("--storage postgres needs DAGSTER_PG_* (eval \"$(make -s services)\")")
    os.environ.update({k: v for k, v in env.items() if k in ("MCE_HOME", "DAGSTER_HOME")})
    if args.backend == "neo4j":
        os.environ.update({k: env[k] for k in env if k.startswith("NEO4J_")})
    from mce_dagster.synthetic import write_export

    out: dict = {"sessions": args.sessions, "batch": args.batch, "backend": args.backend, "storage": args.storage,
                 "seed": args.seed, "python": platform.python_version(), "cpus": os.cpu_count()}
    try:
        summary = write_export(work / "sessions.json", args.sessions, args.seed)
        out["spans"] = summary.spans
        print(f"{args.sessions} sessions ({summary.spans} spans), {args.backend} graph, {args.storage} instance, batches of {args.batch}")
        for phase in PHASES:
            out[phase] = run_phase(phase, args, work, env)
    finally:
        if args.backend == "neo4j" and (work / "ids.json").exists():
            from mce_dagster.graph import open_graph

            open_graph().delete_sessions(session_ids(work))  # the bench's sessions and results
        if args.backend == "embedded":
            from mce_dagster.graph.embedded import EmbeddedFalkorDB

            EmbeddedFalkorDB(work / "home").stop()
        shutil.rmtree(work, ignore_errors=True)

    if out["engine"]["stored_results"] != out["plain"]["results"]:
        raise SystemExit(f"the graph holds {out['engine']['stored_results']} results, plain Python computed {out['plain']['results']}")
    floors = out["plain"]["seconds"] + out["graph"]["seconds"] + out["dagster"]["seconds"]
    out["floors_s"] = floors
    out["engine_over_floors"] = out["engine"]["seconds"] / floors
    out["engine_over_plain"] = out["engine"]["seconds"] / out["plain"]["seconds"]
    out["engine_sessions_per_s"] = args.sessions / out["engine"]["seconds"]
    try:
        out["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    results = BENCH / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / f"scale-{args.backend}-{args.storage}-{args.sessions}.json").write_text(json.dumps(out, indent=2))
    print(f"ingest {out['ingest']['sessions_per_s']:.1f} sessions/s; engine {out['engine_sessions_per_s']:.1f} sessions/s, "
          f"peak RSS {out['engine']['peak_rss_mb']:.0f} MB")
    print(f"floors: plain {out['plain']['seconds']:.1f} s + graph {out['graph']['seconds']:.1f} s + dagster "
          f"{out['dagster']['seconds']:.1f} s = {floors:.1f} s; engine {out['engine']['seconds']:.1f} s = "
          f"{out['engine_over_floors']:.2f}x the floors, {out['engine_over_plain']:.1f}x plain")


if __name__ == "__main__":
    main()
