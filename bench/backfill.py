"""Benchmark: N synthetic sessions through the `mce` CLI on the embedded default, as a
user would run them: `mce synth`, `mce ingest`, then one `mce compute --all` that
registers every session as a partition and evaluates them all, batch by batch.

    .venv/bin/python bench/backfill.py --sessions 100000 --workers 2   # make bench-backfill

Each command runs in a process of its own, on a fresh MCE_HOME and DAGSTER_HOME
(the local SQLite instance), with no judge; its wall time and peak RSS are reported,
and the embedded graph server's peak RSS at the end. It then checks what a user would:
every session is a registered partition, no session was left without results, and
every run succeeded. Writes bench/results/backfill-<N>.json.

`--reuse` (with `--work`) evaluates the sessions a previous call ingested there
again: synth and ingest are skipped, the Dagster instance starts empty (so the
backfill registers every partition itself), and results already in the graph are
replaced. The graph server is left running at the end, for the next call.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
MCE = Path(sys.executable).parent / "mce"


def run(step: str, args: list[str], env: dict) -> dict:
    """One `mce` command; its wall time, peak RSS and standard output."""
    started = time.perf_counter()
    child = subprocess.Popen([str(MCE), *args], env=env, stdout=subprocess.PIPE, text=True)
    out = child.stdout.read() if child.stdout else ""
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    result = {"seconds": wall, "peak_rss_mb": usage.ru_maxrss / 1024, "exit": code}
    print(f"  {step:<8} {wall:>9.1f} s   peak RSS {result['peak_rss_mb']:>7.0f} MB   exit {code}", flush=True)
    if code != 0:
        raise SystemExit(f"`mce {' '.join(args)}` failed (exit {code}):\n{out[-2000:]}")
    result["stdout"] = out
    return result


def server_peak_mb(home: Path) -> float | None:
    pid_file = home / "falkordb" / "server.pid"
    try:
        status = Path(f"/proc/{int(pid_file.read_text())}/status").read_text()
    except (OSError, ValueError):
        return None
    line = next((x for x in status.splitlines() if x.startswith("VmHWM:")), None)
    return int(line.split()[1]) / 1024 if line else None


def size_gb(path: Path) -> float:
    """What a directory holds on disk, in GB."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--work", type=Path, help="where the export, graph and instance go (default: a temporary directory)")
    parser.add_argument("--workers", type=int, default=1, help="`mce compute --workers`: runs at once")
    parser.add_argument("--reuse", action="store_true", help="evaluate the sessions already ingested in --work")
    args = parser.parse_args()
    if args.reuse and not (args.work and (args.work / "home").is_dir()):
        parser.error("--reuse needs the --work directory of an earlier call")

    work = args.work or Path(tempfile.mkdtemp(prefix="mce-backfill-"))
    work.mkdir(parents=True, exist_ok=True)
    home, dagster_home = work / "home", work / "dagster"
    # The embedded default for the commands and for this process's checks alike.
    os.environ.update({"MCE_HOME": str(home), "DAGSTER_HOME": str(dagster_home),
                       "LLM_MODEL_NAME": "", "MODEL_PRICES_REFRESH": "false"})
    for name in ("NEO4J_URI", "KG_DB_HOST", "DAGSTER_PG_HOST"):
        os.environ.pop(name, None)
    env = dict(os.environ)

    export = work / "sessions.json"
    out: dict = {"sessions": args.sessions, "seed": args.seed, "cpus": os.cpu_count(), "workers": args.workers, "reused": args.reuse}
    print(f"{args.sessions} sessions through the mce CLI, embedded graph, local SQLite instance, in {work}", flush=True)
    try:
        if args.reuse:
            shutil.rmtree(dagster_home, ignore_errors=True)
        else:
            out["synth"] = run("synth", ["synth", str(export), "--sessions", str(args.sessions), "--seed", str(args.seed)], env)
            out["ingest"] = run("ingest", ["ingest", str(export)], env)
        out["export_mb"] = export.stat().st_size / 2**20
        out["compute"] = run("compute", ["compute", "--all", "--json", "--workers", str(args.workers)], env)
        out["graph_server_peak_mb"] = server_peak_mb(home)
        out["dagster_instance_gb"] = size_gb(dagster_home)
        out["graph_files_gb"] = size_gb(home)
        outcome = json.loads(out["compute"].pop("stdout"))
        out["runs"] = len(outcome["runs"])
        out["failed_runs"] = outcome["failed_runs"]

        from mce_dagster.core.ontology import Label
        from mce_dagster.graph import open_graph
        from mce_dagster.defs.partitions import SESSIONS
        from mce_dagster.runner import dagster_instance

        kg = open_graph()
        unevaluated = kg.select_sessions(evaluated=False)
        out["sessions_without_results"] = len(unevaluated)
        out["results"] = kg.backend.query(f"MATCH (x:{Label.METRIC_RESULT}) RETURN count(x) AS n")[0]["n"]
        with dagster_instance() as instance:
            out["partitions"] = len(instance.get_dynamic_partitions(SESSIONS))
    finally:
        from mce_dagster.graph.embedded import EmbeddedFalkorDB

        if not args.work:
            EmbeddedFalkorDB(home).stop()
            shutil.rmtree(work, ignore_errors=True)

    ingest = ""
    if not args.reuse:
        for step in ("synth", "ingest"):
            out[step].pop("stdout", None)
        out["ingest_sessions_per_s"] = args.sessions / out["ingest"]["seconds"]
        ingest = f"ingest {out['ingest_sessions_per_s']:.1f} sessions/s; "
    out["compute_sessions_per_s"] = args.sessions / out["compute"]["seconds"]
    print(f"export {out['export_mb']:.0f} MB; {ingest}compute {out['compute_sessions_per_s']:.1f} sessions/s in {out['runs']} runs "
          f"({args.workers} at once); graph server peak {out['graph_server_peak_mb'] or 0:.0f} MB")
    print(f"on disk: Dagster instance {out['dagster_instance_gb']:.1f} GB, graph files {out['graph_files_gb']:.1f} GB")
    print(f"{out['partitions']} partitions registered, {out['results']} results stored, "
          f"{out['sessions_without_results']} sessions without results, {len(out['failed_runs'])} failed runs")
    results = BENCH / "results"
    results.mkdir(exist_ok=True)
    (results / f"backfill-{args.sessions}.json").write_text(json.dumps(out, indent=1))
    if out["failed_runs"] or out["sessions_without_results"] or out["partitions"] != args.sessions:
        raise SystemExit("the backfill did not evaluate every session")


if __name__ == "__main__":
    main()
