"""The Dagster UI as a person meets it: `dagster-webserver` and `dagster-daemon` on a
local instance (the dagster.yaml `mce` writes) over an embedded graph holding a few
synthetic sessions, checked through the webserver's GraphQL API, the API the UI
itself uses: the asset graph against the catalog, the sessions partitions and their
status, a backfill launched as the UI launches one and run by the daemon, its results
in the graph, its asset checks and metadata. Then headless Chromium screenshots of the
asset graph and of a partitioned asset's page.
"""

from __future__ import annotations

import html
import math
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conftest import IN_CI, REPO, require
from dagster_ui import DagsterProcesses, wait_for

from mce_dagster.core.ontology import Scope
from mce_dagster.definitions import runtime
from mce_dagster.evaluation import plan
from mce_dagster.defs.assets import SESSION_CONTEXT_KEY, asset_key
from mce_dagster.defs.checks import COVERAGE_CHECK, PLACED_CHECK, RANGE_CHECK

SESSIONS = 4  # ingested, and partitions of `sessions`
BACKFILLED = 3  # the first ones, in one backfill; the last stays unmaterialized
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
ARTIFACTS = REPO / "test-artifacts" / "ui"


def path_of(key) -> str:
    """`Scope/Name` of a Dagster AssetKey or of GraphQL's {"path": [...]}."""
    return "/".join(key["path"] if isinstance(key, dict) else key.path)


@dataclass
class UI:
    dagster: DagsterProcesses
    ids: list[str]  # in partition order
    repository: dict[str, str]
    selection: list[str] = field(default_factory=list)  # asset paths the backfill covers
    statuses_before: dict[str, dict[str, Any]] = field(default_factory=dict)


@pytest.fixture(scope="module")
def ui(kg, mce_home, tmp_path_factory):
    from mce_dagster.ingest import ingest_paths
    from mce_dagster.synthetic import write_export

    export = tmp_path_factory.mktemp("ui") / "sessions.json"
    write_export(export, SESSIONS, seed=1414)
    report = ingest_paths([export], kg)
    ids = sorted(report.sessions)
    assert len(ids) == SESSIONS

    home = mce_home / "dagster"
    env = {**os.environ, "DAGSTER_HOME": str(home), "MCE_HOME": str(mce_home), "DAGSTER_EVENT_BATCH_SIZE": "1000"}
    env.pop("LLM_MODEL_NAME", None)  # judged metrics stay out, as without a key
    # What `make dev` runs before `dagster dev`: the instance's dagster.yaml and its
    # SQLite storage, made once (the webserver and the daemon, started together on
    # no storage, race to create the same tables).
    subprocess.run([sys.executable, "-m", "mce_dagster.instance.local", str(home)], env=env, check=True, timeout=120)
    dagster = DagsterProcesses(env, tmp_path_factory.mktemp("ui-logs"))
    dagster.start_webserver()
    dagster.start_daemon()
    try:
        dagster.wait_for_code_location()
        (repository,) = dagster.graphql(
            "{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }"
        )["repositoriesOrError"]["nodes"]
        selector = {"repositoryName": repository["name"], "repositoryLocationName": repository["location"]["name"]}
        # Partitions added as the UI's "Add partition" adds them.
        for key in ids:
            added = dagster.graphql(
                """mutation($repo: RepositorySelector!, $key: String!) {
                     addDynamicPartition(repositorySelector: $repo, partitionsDefName: "sessions", partitionKey: $key) {
                       __typename ... on PythonError { message } ... on UnauthorizedError { message } } }""",
                {"repo": selector, "key": key},
            )["addDynamicPartition"]
            assert added["__typename"] == "AddDynamicPartitionSuccess", added
        yield UI(dagster, ids, selector)
    finally:
        dagster.stop()
        print(f"\nDagster logs of tests/test_ui.py: {dagster.logs}")


ASSET_NODES = """{ assetNodes { assetKey { path } groupName isPartitioned opVersion dependencyKeys { path }
                   metadataEntries { label ... on TextMetadataEntry { text } ... on IntMetadataEntry { intValue } } } }"""


def test_every_enabled_metric_is_an_asset_in_its_scope_group_with_its_upstream_edges(ui):
    nodes = {path_of(n["assetKey"]): n for n in ui.dagster.graphql(ASSET_NODES)["assetNodes"]}
    catalog, config = runtime()
    # The definitions hold every metric of the catalog; the enabled ones are among them.
    assert config.enabled and {m.key for m in config.enabled} <= {m.key for m in catalog.metrics.values()}
    for metric in catalog.metrics.values():
        key = path_of(asset_key(metric.key))
        assert key in nodes, f"{key} is not an asset in the UI"
        node = nodes[key]
        assert node["groupName"] == metric.scope.value, key
        expected = {path_of(SESSION_CONTEXT_KEY)} | {path_of(asset_key(d)) for d in metric.dependencies}
        assert {path_of(k) for k in node["dependencyKeys"]} == expected, key
        # Per session, except the population metrics, which read all sessions.
        assert node["isPartitioned"] is (metric.scope is not Scope.POPULATION), key
        # The catalog's version is the code version that marks stale partitions.
        assert node["opVersion"] == str(metric.definition.version), key
        if metric.scope is not Scope.POPULATION:
            meta = {e["label"]: e.get("text", e.get("intValue")) for e in node["metadataEntries"]}
            assert meta["unit"] == metric.definition.unit and meta["version"] == metric.definition.version, (key, meta)
    # Edges the other way too: what hangs below LLMCall/Duration in the UI.
    below = {path_of(n["assetKey"]) for n in nodes.values() if {"path": ["LLMCall", "Duration"]} in n["dependencyKeys"]}
    assert below == {
        path_of(asset_key(m.key)) for m in catalog.metrics.values() if any(path_of(asset_key(d)) == "LLMCall/Duration" for d in m.dependencies)
    }


PARTITIONS = """query($key: AssetKeyInput!) { assetNodeOrError(assetKey: $key) { ... on AssetNode {
    partitionKeysByDimension { name partitionKeys }
    partitionStats { numMaterialized numPartitions numFailed numMaterializing }
    assetPartitionStatuses { ... on DefaultPartitionStatuses {
        materializedPartitions unmaterializedPartitions failedPartitions materializingPartitions } } } } }"""


def partition_statuses(ui: UI, path: str) -> dict[str, Any]:
    node = ui.dagster.graphql(PARTITIONS, {"key": {"path": path.split("/")}})["assetNodeOrError"]
    assert node, f"{path}: not an asset node"
    return node


def backfill_selection() -> list[str]:
    """What a person backfills without a judge model: the session context and the
    per-session metrics the sensors evaluate."""
    _, config = runtime()
    return [path_of(key) for key in plan(config).asset_keys]


@pytest.fixture(scope="module")
def backfill(ui):
    """One backfill over the first sessions, launched through GraphQL as the UI's
    "Materialize selected" over a partition range launches it, and run by the daemon."""
    ui.selection = backfill_selection()
    ui.statuses_before = {path: partition_statuses(ui, path) for path in ui.selection}
    chosen = ui.ids[:BACKFILLED]
    launched = ui.dagster.graphql(
        """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
             __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message stack } } }""",
        {"params": {"partitionNames": chosen, "assetSelection": [{"path": p.split("/")} for p in ui.selection]}},
    )["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    started = time.monotonic()

    def finished() -> dict[str, Any] | None:
        state = ui.dagster.graphql(
            """query($id: String!) { partitionBackfillOrError(backfillId: $id) { ... on PartitionBackfill {
                 status numPartitions partitionNames error { message }
                 runs(limit: 20) { id status tags { key value } } } } }""",
            {"id": launched["backfillId"]},
        )["partitionBackfillOrError"]
        return state if state["status"] not in ("REQUESTED", "CANCELING", "FAILING") else None

    state = wait_for(finished, 300, "the backfill to finish", ui.dagster.log, every=2)
    print(f"\nbackfill of {len(chosen)} sessions x {len(ui.selection)} assets finished in {time.monotonic() - started:.0f} s")
    return {"id": launched["backfillId"], "chosen": chosen, **state}


def test_the_sessions_partitions_are_listed_with_their_status(ui, backfill):
    for path in ui.selection:
        before, after = ui.statuses_before[path], partition_statuses(ui, path)
        for node in (before, after):
            (dimension,) = node["partitionKeysByDimension"]
            assert dimension["partitionKeys"] == ui.ids, path  # every session, in the order added
        b, a = before["assetPartitionStatuses"], after["assetPartitionStatuses"]
        assert b["materializedPartitions"] == [] and sorted(b["unmaterializedPartitions"]) == ui.ids, (path, b)
        assert sorted(a["materializedPartitions"]) == sorted(backfill["chosen"]), (path, a)
        assert sorted(a["unmaterializedPartitions"]) == sorted(set(ui.ids) - set(backfill["chosen"])), (path, a)
        assert a["failedPartitions"] == [] and a["materializingPartitions"] == [], (path, a)
        assert after["partitionStats"] == {
            "numMaterialized": len(backfill["chosen"]), "numPartitions": len(ui.ids), "numFailed": 0, "numMaterializing": 0,
        }, path


def test_a_backfill_launched_through_graphql_completes_and_its_results_are_in_the_graph(ui, backfill, kg):
    from mce_dagster.client import MCEClient

    assert backfill["status"] in ("COMPLETED", "COMPLETED_SUCCESS"), backfill
    assert sorted(backfill["partitionNames"]) == sorted(backfill["chosen"]) and backfill["numPartitions"] == len(backfill["chosen"])
    # The assets' single-run backfill policy: one run over the sessions' range.
    (run,) = backfill["runs"]
    assert run["status"] == "SUCCESS", ui.dagster.log()
    tags = {t["key"]: t["value"] for t in run["tags"]}
    assert (tags[RANGE_START], tags[RANGE_END]) == (backfill["chosen"][0], backfill["chosen"][-1])
    # The results are in the graph, read as a user reads them: every backfilled session
    # has results of the selected metrics, the other session none.
    with MCEClient(kg) as client:
        evaluated = {s["session_id"] for s in client.list_sessions(evaluated=True)}
        assert evaluated == set(backfill["chosen"])
        per_session = {sid: client.get_metrics(sid, recursive=True) for sid in ui.ids}
    selected = set(ui.selection) - {path_of(SESSION_CONTEXT_KEY)}
    for sid in backfill["chosen"]:
        stored = {f"{r['scope']}/{r['metric']}" for r in per_session[sid]}
        assert stored and stored <= selected, sid
        assert {"Session/Duration", "Session/LLMCallCount", "LLMCall/Duration"} <= stored, sid
    assert per_session[ui.ids[-1]] == []


MATERIALIZATIONS = """query($keys: [AssetKeyInput!], $partition: String!) { assetNodes(assetKeys: $keys) {
    assetKey { path }
    assetMaterializations(partitions: [$partition], limit: 1) { runId partition
        metadataEntries { label __typename ... on IntMetadataEntry { intValue } ... on FloatMetadataEntry { floatValue }
                          ... on MarkdownMetadataEntry { mdStr } } }
    assetChecksOrError { __typename ... on AssetChecks { checks { name
        executionForLatestMaterialization { runId status evaluation { success severity
            metadataEntries { label __typename ... on IntMetadataEntry { intValue }
                              ... on FloatMetadataEntry { floatValue } } } } } } } } }"""


def test_asset_checks_and_materialization_metadata_appear_after_the_run(ui, backfill, kg):
    (run,) = backfill["runs"]
    chosen = backfill["chosen"]
    nodes = ui.dagster.graphql(MATERIALIZATIONS, {"keys": [{"path": p.split("/")} for p in ui.selection], "partition": chosen[0]})["assetNodes"]
    assert sorted(path_of(n["assetKey"]) for n in nodes) == sorted(ui.selection)
    # What the graph holds per metric over the run's sessions, to compare the metadata with.
    values: dict[str, list[float]] = {}
    for r in kg.read_results(chosen):
        values.setdefault(f"{r['scope']}/{r['name']}", []).append(r["result"])
    contexts = kg.read_contexts(chosen)
    for node in nodes:
        path = path_of(node["assetKey"])
        (materialization,) = node["assetMaterializations"]
        assert materialization["runId"] == run["id"] and materialization["partition"] == chosen[0], path
        meta = {e["label"]: e.get("intValue", e.get("floatValue", e.get("mdStr"))) for e in materialization["metadataEntries"]}
        checks = {c["name"]: c["executionForLatestMaterialization"] for c in node["assetChecksOrError"]["checks"]}
        # The run's summary is on its check results (once per run, not per partition).
        summary = {
            name: {e["label"]: e.get("intValue", e.get("floatValue")) for e in execution["evaluation"]["metadataEntries"]}
            for name, execution in checks.items() if execution is not None
        }
        if path == path_of(SESSION_CONTEXT_KEY):
            assert meta == {}, meta
            assert summary[PLACED_CHECK]["sessions"] == len(chosen)
            assert set(checks) == {PLACED_CHECK}
        else:
            assert set(checks) == {COVERAGE_CHECK, RANGE_CHECK}, path
            numbers = values.get(path, [])
            scope = Scope(path.split("/")[0])
            # The metadata counts what the graph holds: a stored result per evaluated
            # entity, and every entity of the scope accounted for.
            assert summary[COVERAGE_CHECK]["sessions"] == len(chosen), path
            assert meta["evaluated"] == len(numbers) == summary[COVERAGE_CHECK]["results_written"], (path, meta, summary)
            assert meta["failed"] == 0 and "failures" not in meta, (path, meta)
            entities = sum(len(c.entities(scope)) for c in contexts.values())
            assert meta["evaluated"] + meta["not_applicable"] == entities, (path, meta, entities)
            spread = summary[RANGE_CHECK]
            if numbers:
                assert math.isclose(spread["mean"], sum(numbers) / len(numbers), rel_tol=1e-6), (path, spread)
                assert (spread["min"], spread["max"]) == pytest.approx((min(numbers), max(numbers))), (path, spread)
            else:
                assert "mean" not in spread, (path, spread)
        # Each check ran in the backfill's run and passed on these sessions.
        for name, execution in checks.items():
            assert execution is not None, f"{path} {name}: no execution after the run"
            assert execution["runId"] == run["id"] and execution["status"] == "SUCCEEDED", (path, name, execution)
            assert execution["evaluation"]["success"], (path, name, execution)


# -- what a person sees: headless Chromium --------------------------------------------


def chromium() -> str:
    """Debian's chromium: services/chromium.sh installs it in CI; elsewhere the test
    skips without it."""
    if IN_CI:
        done = subprocess.run(["bash", str(REPO / "services" / "chromium.sh")], capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"services/chromium.sh failed:\n{done.stderr[-3000:]}"
        return done.stdout.strip()
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    require(found is not None, "no chromium on PATH (bash services/chromium.sh installs Debian's package)")
    return found


def screenshot(browser: str, url: str, png: Path, profile: Path) -> str:
    """The page as the browser shows it after its scripts ran, and its DOM's text.
    The UI is a JavaScript app: virtual time lets its queries and layout finish."""
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={profile}",
         "--window-size=1600,1000", "--virtual-time-budget=20000", f"--screenshot={png}", "--dump-dom", url],
        capture_output=True, text=True, timeout=180,
    )
    assert done.returncode == 0 and png.is_file(), f"chromium on {url} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return html.unescape(re.sub(r"<[^>]+>", " ", done.stdout))


def assert_not_blank(png: Path) -> None:
    from PIL import Image, ImageStat

    with Image.open(png) as image:
        assert image.size == (1600, 1000), image.size
        gray = image.convert("L")
        # A blank or half-drawn page is one flat colour; a drawn one has text and boxes.
        assert ImageStat.Stat(gray).stddev[0] > 10, f"{png} looks blank"
        assert len(gray.getcolors(256) or []) > 32, f"{png} has hardly any shades"


def test_screenshots_of_the_asset_graph_and_a_partitioned_asset(ui, backfill, tmp_path):
    browser = chromium()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS.parent / ".gitignore").write_text("*\n")  # the folder is never committed
    # A new instance opens with Dagster's "join the community" dialog over the page;
    # the UI's "Skip" dismisses it for the instance with this mutation.
    assert ui.dagster.graphql("mutation { setNuxSeen }")["setNuxSeen"] is True
    catalog, config = runtime()
    shots = {}

    # The asset graph: one box per group, the groups the enabled metrics' scopes name.
    png = ARTIFACTS / "asset-graph.png"
    text = screenshot(browser, f"{ui.dagster.url}/asset-groups", png, tmp_path / "profile")
    groups = {m.scope.value for m in config.enabled}
    assert groups <= set(text.split()), f"groups missing from the page: {groups - set(text.split())}"
    shots["asset graph"] = png

    # A metric with its upstream metrics, across groups: the dependency graph of the catalog.
    metric = next(m for m in catalog.metrics.values() if path_of(asset_key(m.key)) == "Session/AvgLLMCallDuration")
    png = ARTIFACTS / "asset-lineage.png"
    text = screenshot(
        browser, f"{ui.dagster.url}/assets/Session/AvgLLMCallDuration?view=lineage&lineageScope=upstream", png, tmp_path / "profile"
    )
    upstream = {SESSION_CONTEXT_KEY.path[-1]} | {asset_key(d).path[-1] for d in metric.dependencies}
    assert upstream <= set(text.split()) and "AvgLLMCallDuration" in text, text[:2000]
    shots["lineage"] = png

    # A partitioned asset's page: its sessions, which are materialized, and the
    # metadata of the first one's materialization.
    chosen = backfill["chosen"]
    png = ARTIFACTS / "asset-partitions.png"
    text = screenshot(browser, f"{ui.dagster.url}/assets/Session/Duration?view=partitions&partition={chosen[0]}", png, tmp_path / "profile")
    squeezed = " ".join(text.split())
    assert f"Materialized ({len(chosen)})" in squeezed and f"Missing ({len(ui.ids) - len(chosen)})" in squeezed, squeezed[:2000]
    assert chosen[0] in squeezed and "evaluated" in squeezed, squeezed[:2000]
    shots["partitions"] = png

    for what, png in shots.items():
        assert_not_blank(png)
        print(f"\nscreenshot of the {what}: {png}")
