"""Benchmark: ingestion rate, and one Dagster run over N sessions against the same
metric functions in plain Python (no graph, no Dagster), side by side in one run.

    .venv/bin/python bench/evaluate.py [--sessions 1000] [--seed 1] [--instance sqlite|memory|both]

Prints a table and writes bench/results/evaluate-<N>.json.
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

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--instance", choices=["sqlite", "memory", "both"], default="both")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="mce-bench-"))
    os.environ["MCE_HOME"] = str(work / "home")
    os.environ["DAGSTER_HOME"] = str(work / "dagster")

    import dagster as dg

    from mce_dagster.definitions import defs, runtime
    from mce_dagster.core.evaluate import evaluate_all
    from mce_dagster.defs.jobs import EVALUATE_JOB
    from mce_dagster.graph import open_graph
    from mce_dagster.graph.embedded import EmbeddedFalkorDB
    from mce_dagster.ingest import IngestReport, build_graphs, collect_spans, ingest_paths
    from mce_dagster.prices import load_price_table
    from mce_dagster.evaluation import QUIET_RUN_CONFIG, RANGE_END, RANGE_START
    from mce_dagster.runner import dagster_instance
    from mce_dagster.synthetic import write_export

    catalog, config = runtime()
    metrics = list(config.enabled)
    export = work / "sessions.json"
    t = time.perf_counter()
    summary = write_export(export, args.sessions, args.seed)
    generate_s = time.perf_counter() - t

    out: dict[str, object] = {
        "sessions": summary.sessions,
        "spans": summary.spans,
        "metric_assets": len(metrics),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "generate_s": generate_s,
    }
    try:
        kg = open_graph()
        t = time.perf_counter()
        report = ingest_paths([export], kg)
        out["ingest_s"] = time.perf_counter() - t
        out["ingest_sessions_per_s"] = len(report.sessions) / out["ingest_s"]
        ids = report.sessions

        # Plain Python: parse the same export and run the same functions in memory.
        t = time.perf_counter()
        parsed = IngestReport()
        contexts = {g.session_id: g.to_context() for g in build_graphs(collect_spans([export], parsed), parsed)}
        out["plain_parse_s"] = time.perf_counter() - t
        prices = load_price_table()
        t = time.perf_counter()
        batches = evaluate_all(metrics, contexts, prices)
        out["plain_evaluate_s"] = time.perf_counter() - t
        out["results"] = sum(b.evaluated for b in batches.values())

        t = time.perf_counter()
        kg.read_contexts(ids)
        out["graph_read_contexts_s"] = time.perf_counter() - t

        job = defs.resolve_job_def(EVALUATE_JOB)
        instances = {"memory": lambda: dg.DagsterInstance.ephemeral(), "sqlite": dagster_instance}
        for name in (["memory", "sqlite"] if args.instance == "both" else [args.instance]):
            instance = instances[name]()
            instance.add_dynamic_partitions("sessions", ids)
            t = time.perf_counter()
            result = job.execute_in_process(
                instance=instance, tags={RANGE_START: ids[0], RANGE_END: ids[-1]}, run_config=QUIET_RUN_CONFIG
            )
            elapsed = time.perf_counter() - t
            if not result.success:
                raise SystemExit(f"the Dagster run failed on the {name} instance")
            out[f"dagster_{name}_s"] = elapsed
            out[f"dagster_{name}_ratio"] = elapsed / out["plain_evaluate_s"]
            out[f"dagster_{name}_ms_per_asset_partition"] = 1000 * elapsed / (len(metrics) * len(ids))
        out["stored_results"] = kg.count_results()
        # Both runs write the same result ids, so the graph holds exactly what the
        # plain evaluation computed, or the comparison is not like for like.
        if out["stored_results"] != out["results"]:
            raise SystemExit(f"the graph holds {out['stored_results']} results, plain Python computed {out['results']}")
    finally:
        EmbeddedFalkorDB(work / "home").stop()
        shutil.rmtree(work, ignore_errors=True)

    try:
        out["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    results = REPO / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / f"evaluate-{args.sessions}.json").write_text(json.dumps(out, indent=2))
    width = max(len(k) for k in out)
    for key, value in out.items():
        print(f"{key:<{width}}  {value:,.3f}" if isinstance(value, float) else f"{key:<{width}}  {value}")


if __name__ == "__main__":
    sys.exit(main())
