"""Benchmark: reading sessions back from the graph (`KnowledgeGraph.read_contexts`,
what every evaluation run does first), on the embedded FalkorDB.

    .venv/bin/python bench/read_contexts.py [--sessions 500] [--batch 100] [--repeat 5]

To compare with another commit side by side, check it out in a worktree and run the
same command with PYTHONPATH pointing at it, alternating the two.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mce-bench-read-"))
    os.environ["MCE_HOME"] = str(work / "home")
    os.environ.setdefault("MODEL_PRICES_REFRESH", "false")

    import mce_dagster
    from mce_dagster.graph.embedded import EmbeddedFalkorDB
    from mce_dagster.graph.store import KnowledgeGraph, embedded_backend
    from mce_dagster.ingest import ingest_paths
    from mce_dagster.synthetic import write_export

    write_export(work / "export.json", args.sessions, seed=5)
    kg = KnowledgeGraph(embedded_backend(work / "home"))
    ids = ingest_paths([work / "export.json"], kg).sessions
    times = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        calls = 0
        for i in range(0, len(ids), args.batch):
            contexts = kg.read_contexts(ids[i : i + args.batch])
            calls += sum(len(c.nodes) for c in contexts.values())
        times.append(time.perf_counter() - started)
    kg.close()
    EmbeddedFalkorDB(work / "home").stop()
    best, median = min(times), statistics.median(times)
    print(json.dumps({
        "code": str(Path(mce_dagster.__file__).parent.parent),
        "sessions": len(ids), "nodes": calls, "best_s": round(best, 3), "median_s": round(median, 3),
        "sessions_per_s": round(len(ids) / median, 1),
    }))


if __name__ == "__main__":
    main()
