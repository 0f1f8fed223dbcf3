"""Benchmark: peak memory of `mce ingest` against the size of the export, side by
side in one run.

Synthetic exports of about 50, 100 and 200 MB (one JSON list each) are ingested,
each by a fresh `mce ingest` process into a fresh embedded FalkorDB. The peak RSS
is that of the ingesting Python process alone (its VmHWM at exit). The graph server
is a separate, daemonized redis-server that holds the graph in memory, so it grows
with what is stored; its own peak is shown apart and is not part of the ceiling.
Beside each run, the staged size of the largest write batch it makes (the file
staged again here, apart): the peak follows that, not the size of the file.

With --byte-bound, the largest export is ingested once more with a session count
per batch no export reaches, so that every batch is cut by bytes
(mce_dagster.ingest.MAX_BATCH_BYTES): the largest batch the defaults allow, short
of a single session larger than that.

    .venv/bin/python bench/ingest_memory.py [--sizes 50,100,200] [--batch-size 200] [--seed 1] [--byte-bound]

Prints a table and writes bench/results/ingest-memory.json. Exits 1 when a peak
is above CEILING_MB. Files and batches in MB of 10^6 bytes; RSS in MB of 2^20 bytes
(kB/1024, as /proc gives it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
MCE = REPO / ".venv" / "bin" / "mce"

# Peak RSS of the ingesting process, whatever the size of the export, with the
# default batch limits (200 sessions, MAX_BATCH_BYTES of staged rows), as long as no
# one session stages more than MAX_BATCH_BYTES (it is then a batch of its own).
CEILING_MB = 256
MB = 1_000_000
SAMPLE_SESSIONS = 1000
UNBOUNDED_SESSIONS = 1_000_000


def session_bytes(seed: int, work: Path) -> float:
    """Average bytes per synthetic session, from a sample with the same seed."""
    from mce_dagster.synthetic import write_export

    sample = write_export(work / "sample.json", SAMPLE_SESSIONS, seed=seed)
    return sample.path.stat().st_size / SAMPLE_SESSIONS


def make_export(work: Path, size_mb: int, per_session: float, seed: int) -> dict:
    from mce_dagster.synthetic import write_export

    sessions = max(1, round(size_mb * MB / per_session))
    summary = write_export(work / f"export-{size_mb}mb.json", sessions, seed=seed)
    return {"target_mb": size_mb, "path": summary.path, "sessions": sessions, "spans": summary.spans,
            "mb": summary.path.stat().st_size / MB}


def child_env(home: Path) -> dict[str, str]:
    # The embedded FalkorDB under `home`, never a Neo4j the shell points at.
    env = {k: v for k, v in os.environ.items() if k not in ("NEO4J_URI", "KG_DB_HOST")}
    env["MCE_HOME"] = str(home)
    return env


def server_peak_mb(pid: int | None) -> float | None:
    """The high-water mark of the graph server's RSS (VmHWM)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, TypeError, ValueError):
        pass
    return None


# Runs the `mce` script as it is, and writes the process's own VmHWM (peak RSS of its
# memory since exec) when it exits. Not ru_maxrss from wait4: Linux counts in it the
# high-water mark of the memory an exec replaces, which for a child of vfork (as
# subprocess spawns) is the parent's, so a large parent hides the child's peak.
_PEAK_AT_EXIT = """
import atexit, runpy, sys
out = sys.argv.pop(1)
sys.argv.pop(0)  # "-c": the script then sees its own argv
def peak():
    with open("/proc/self/status") as status:
        kb = next(line for line in status if line.startswith("VmHWM:")).split()[1]
    with open(out, "w") as f:
        f.write(kb)
atexit.register(peak)
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_ingest(path: Path, home: Path, batch_size: int) -> dict:
    """One `mce ingest` process: its peak RSS, wall time, and what it printed."""
    log, peak = home / "ingest.log", home / "peak-kb"
    peak.unlink(missing_ok=True)
    command = [sys.executable, "-c", _PEAK_AT_EXIT, str(peak), str(MCE), "ingest", "--batch-size", str(batch_size), str(path)]
    started = time.perf_counter()
    with log.open("wb") as out:
        done = subprocess.run(command, env=child_env(home), cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - started
    text = log.read_text(errors="replace")
    if done.returncode != 0 or not peak.exists():
        raise RuntimeError(f"mce ingest {path} exited {done.returncode}:\n{text[-2000:]}")
    found = re.search(r"ingested (\d+) sessions \((\d+) spans\).* in ([\d.]+) s", text)
    if found is None:
        raise RuntimeError(f"mce ingest printed no summary:\n{text[-2000:]}")
    sessions, spans, ingest_s = int(found[1]), int(found[2]), float(found[3])
    return {"peak_rss_mb": int(peak.read_text()) / 1024, "wall_s": wall, "ingest_s": ingest_s,
            "ingested_sessions": sessions, "ingested_spans": spans, "sessions_per_s": sessions / ingest_s}


def largest_batch_mb(path: Path, batch_size: int) -> float:
    """Staged megabytes of the largest write batch ingesting this file makes, by
    staging it here as `mce ingest` does: what the peak follows."""
    from mce_dagster.ingest import MAX_BATCH_BYTES, IngestReport
    from mce_dagster.ingest.pipeline import _stage_file
    from mce_dagster.ingest.stage import Stage

    with tempfile.TemporaryDirectory(prefix="mce-im-stage-") as tmp, Stage(Path(tmp)) as stage:
        _stage_file(stage, path, IngestReport())
        stage.finish()
        batches = stage.batches(batch_size, MAX_BATCH_BYTES)
        return max(sum(len(row.data) for _, rows in batch for row in rows) for batch in batches) / MB


def measure(export: dict, batch_size: int) -> dict:
    """Ingest one export into a graph of its own; the server is started first, so
    that the measured process only connects to it."""
    from mce_dagster.graph.embedded import EmbeddedFalkorDB

    home = Path(tempfile.mkdtemp(prefix="mce-im-"))
    server = EmbeddedFalkorDB(home)
    try:
        server.ensure_running()
        row = run_ingest(export["path"], home, batch_size)
        row["server_peak_mb"] = server_peak_mb(server.pid())
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)
    if row["ingested_sessions"] != export["sessions"]:
        raise RuntimeError(f"{export['path']}: {row['ingested_sessions']} of {export['sessions']} sessions ingested")
    row["largest_batch_mb"] = largest_batch_mb(export["path"], batch_size)
    return {**{k: v for k, v in export.items() if k != "path"}, "batch_size": batch_size, **row}


def print_table(rows: list[dict]) -> None:
    print(f"{'export MB':>9} {'sessions':>8} {'spans':>7} {'batch':>7} {'largest batch MB':>16} {'peak RSS MB':>11} "
          f"{'wall s':>7} {'ingest s':>8} {'sessions/s':>10} {'server peak MB':>14}")
    for r in rows:
        batch = "bytes" if r["batch_size"] >= UNBOUNDED_SESSIONS else str(r["batch_size"])
        server = f"{r['server_peak_mb']:.0f}" if r["server_peak_mb"] is not None else "?"
        print(f"{r['mb']:>9.1f} {r['sessions']:>8} {r['spans']:>7} {batch:>7} {r['largest_batch_mb']:>16.1f} {r['peak_rss_mb']:>11.1f} "
              f"{r['wall_s']:>7.1f} {r['ingest_s']:>8.1f} {r['sessions_per_s']:>10.0f} {server:>14}")


def summarize(rows: list[dict], batch_size: int) -> dict:
    same_batch = [r for r in rows if r["batch_size"] == batch_size]
    smallest, largest = same_batch[0], same_batch[-1]
    ratio = largest["peak_rss_mb"] / smallest["peak_rss_mb"]
    highest = max(r["peak_rss_mb"] for r in rows)
    print(f"\npeak RSS of the ingesting Python process (the graph server is a separate process, not included)")
    print(f"peak RSS {largest['mb']:.1f} MB / {smallest['mb']:.1f} MB export: {ratio:.2f} "
          f"for {largest['mb'] / smallest['mb']:.1f}x the file")
    verdict = "under" if highest <= CEILING_MB else "ABOVE"
    print(f"highest peak {highest:.1f} MB: {verdict} the {CEILING_MB} MB ceiling")
    return {"peak_ratio_largest_smallest": ratio, "highest_peak_mb": highest, "ceiling_mb": CEILING_MB,
            "under_ceiling": highest <= CEILING_MB}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,100,200", help="export sizes in MB (10^6 bytes), comma-separated")
    parser.add_argument("--batch-size", type=int, default=200, help="--batch-size of mce ingest (its default: 200)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--byte-bound", action="store_true", help="also the largest export with batches cut by bytes only")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))

    from mce_dagster.ingest import MAX_BATCH_BYTES

    work = Path(tempfile.mkdtemp(prefix="mce-im-exports-"))
    out: dict[str, object] = {"python": platform.python_version(), "cpus": os.cpu_count(),
                              "max_batch_bytes": MAX_BATCH_BYTES, "seed": args.seed}
    rows = []
    try:
        per_session = session_bytes(args.seed, work)
        exports = [make_export(work, size, per_session, args.seed) for size in sizes]
        shown = ", ".join(f"{e['mb']:.1f}" for e in exports)
        print(f"exports of {shown} MB "
              f"({per_session / 1000:.0f} kB a session), each ingested by a fresh `mce ingest`\n")
        for export in exports:
            rows.append(measure(export, args.batch_size))
        if args.byte_bound:
            rows.append(measure(exports[-1], UNBOUNDED_SESSIONS))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(rows)
    out["runs"] = rows
    out.update(summarize(rows, args.batch_size))
    try:
        out["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    results = BENCH / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "ingest-memory.json").write_text(json.dumps(out, indent=2, default=str))
    return 0 if out["under_ceiling"] else 1


if __name__ == "__main__":
    sys.exit(main())
