"""Benchmark: is the project usable with 100,000 sessions registered as dynamic
partitions? Side by side in one run, on a small and a large instance of the same
storage: registering the partitions, a poll-sensor tick over new sessions, and the
GraphQL queries the UI sends for the asset graph and for a partitioned asset's page
(the project's code location loaded from workspace.yaml, as `dagster dev` does).

    .venv/bin/python bench/partitions.py [--sizes 1000 100000] [--storage sqlite|postgres]

A share of each instance's partitions is marked materialized (runless events on the
session context asset and one metric asset), so status queries have something to
count. Writes bench/results/partitions-<storage>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

METRIC = ["Session", "LLMCallCount"]

ASSET_GRAPH = """
query { assetNodes { assetKey { path } groupName dependencyKeys { path } isPartitioned } }
"""
PARTITION_STATUS = """
query ($path: [String!]!) {
  assetNodeOrError(assetKey: {path: $path}) {
    ... on AssetNode {
      partitionStats { numMaterialized numPartitions numFailed numMaterializing }
      assetPartitionStatuses {
        ... on DefaultPartitionStatuses { materializedPartitions failedPartitions materializingPartitions }
      }
    }
  }
}
"""
PARTITION_KEYS = """
query ($path: [String!]!) {
  assetNodeOrError(assetKey: {path: $path}) {
    ... on AssetNode { partitionKeysByDimension { name partitionKeys } }
  }
}
"""
ONE_PARTITION = """
query ($path: [String!]!, $partition: String!) {
  assetOrError(assetKey: {path: $path}) {
    ... on Asset { assetMaterializations(partitions: [$partition], limit: 5) { runOrError { __typename } partition timestamp } }
  }
}
"""


def timed(fn, repeat: int = 3) -> tuple[float, object]:
    times, value = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), value


def graphql(context, query: str, variables: dict | None = None) -> dict:
    from dagster_graphql.test.utils import execute_dagster_graphql

    result = execute_dagster_graphql(context, query, variables)
    if result.errors:
        raise SystemExit(f"GraphQL errors: {result.errors}")
    return result.data


def measure(size: int, storage: str, work: Path, new_sessions: int) -> dict:
    import bookkeeping
    import dagster as dg
    from dagster_graphql.test.utils import define_out_of_process_context

    from mce_dagster.defs.assets import SESSION_CONTEXT_KEY
    from mce_dagster.defs.partitions import SESSIONS
    from mce_dagster.defs.sensors import PollCursor, poll_tick
    from mce_dagster.graph import open_graph
    from mce_dagster.settings import Settings

    out: dict = {"partitions": size}
    instance = (bookkeeping.open_pg_instance("pg-project", work / f"pg-{size}") if storage == "postgres"
                else bookkeeping.open_instance("project", work / f"sqlite-{size}"))
    keys = [f"bench-{i:07d}" for i in range(size)]
    started = time.perf_counter()
    for i in range(0, size, 10_000):
        instance.add_dynamic_partitions(SESSIONS, keys[i : i + 10_000])
    out["register_s"] = time.perf_counter() - started

    # A tenth materialized, at most 500: what the status queries count.
    marked = keys[: min(size // 10, 500)]
    started = time.perf_counter()
    for key in marked:
        for asset in (SESSION_CONTEXT_KEY, dg.AssetKey(METRIC)):
            instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=asset, partition=key))
    out["mark_materialized_s"] = time.perf_counter() - started
    out["materialized"] = len(marked)

    # A poll-sensor tick over sessions that are in the graph but not yet registered.
    graph = open_graph()
    settings = Settings.from_env()
    asset_keys = [SESSION_CONTEXT_KEY, dg.AssetKey(METRIC)]
    out["sensor_tick_s"], (requested, _) = timed(
        lambda: poll_tick(instance, graph, settings, PollCursor.load(None), asset_keys=asset_keys)
    )
    if len(requested) != new_sessions:
        raise SystemExit(f"the sensor tick requested {len(requested)} sessions of {new_sessions}")

    with define_out_of_process_context(str(REPO / "workspace.yaml"), None, instance) as context:
        out["asset_graph_s"], data = timed(lambda: graphql(context, ASSET_GRAPH))
        out["assets"] = len(data["assetNodes"])
        for name, path in (("session_context", SESSION_CONTEXT_KEY.path), ("metric", METRIC)):
            out[f"{name}_status_s"], data = timed(lambda: graphql(context, PARTITION_STATUS, {"path": path}))
            stats = data["assetNodeOrError"]["partitionStats"]
            if (stats["numPartitions"], stats["numMaterialized"]) != (size, len(marked)):
                raise SystemExit(f"{path}: GraphQL says {stats}, expected {size} partitions, {len(marked)} materialized")
        out["partition_keys_s"], data = timed(lambda: graphql(context, PARTITION_KEYS, {"path": METRIC}))
        listed = data["assetNodeOrError"]["partitionKeysByDimension"][0]["partitionKeys"]
        if len(listed) != size:
            raise SystemExit(f"GraphQL lists {len(listed)} partition keys of {size}")
        out["one_partition_s"], data = timed(
            lambda: graphql(context, ONE_PARTITION, {"path": METRIC, "partition": marked[-1]})
        )
        if len(data["assetOrError"]["assetMaterializations"]) != 1:
            raise SystemExit(f"partition {marked[-1]}: {data}")
    instance.dispose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--storage", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--new-sessions", type=int, default=200, help="sessions in the graph for the sensor tick")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="mce-partitions-"))
    os.environ.update(MCE_HOME=str(work / "home"), DAGSTER_HOME=str(work / "dagster"), MODEL_PRICES_REFRESH="false")
    for name in ("NEO4J_URI", "KG_DB_HOST"):
        os.environ.pop(name, None)
    os.chdir(REPO)  # workspace.yaml's working directory

    import warnings

    warnings.filterwarnings("ignore", message=".*is currently in beta")
    import bookkeeping

    from mce_dagster.graph import open_graph
    from mce_dagster.graph.embedded import EmbeddedFalkorDB
    from mce_dagster.ingest import ingest_paths
    from mce_dagster.synthetic import write_export

    rows = []
    try:
        write_export(work / "new.json", args.new_sessions, 5)
        ingest_paths([work / "new.json"], open_graph())
        for size in args.sizes:
            rows.append(measure(size, args.storage, work, args.new_sessions))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        bookkeeping.drop_pg_schemas()
        EmbeddedFalkorDB(work / "home").stop()
        shutil.rmtree(work, ignore_errors=True)

    out = {"storage": args.storage, "rows": rows}
    (BENCH / "results").mkdir(exist_ok=True)
    (BENCH / "results" / f"partitions-{args.storage}.json").write_text(json.dumps(out, indent=2))
    columns = [k for k in rows[0] if k.endswith("_s")]
    print(f"\n{'seconds':<26}" + "".join(f"{r['partitions']:>14,}" for r in rows))
    for c in columns:
        print(f"{c:<26}" + "".join(f"{r[c]:>14.3f}" for r in rows))


if __name__ == "__main__":
    main()
