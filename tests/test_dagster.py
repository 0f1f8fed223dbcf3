"""The Dagster definitions: the asset graph is the metric graph, and runs write
the same values the plain functions compute, on each graph backend; the CLI and
the Python client read back what the runs wrote."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import dagster as dg
import pytest

from conftest import REPO
from mce_dagster.core.evaluate import evaluate_all
from mce_dagster.core.metric import DependencyKey
from mce_dagster.core.ontology import Scope
from mce_dagster.definitions import build_definitions, runtime
from mce_dagster.defs.assets import asset_key
from mce_dagster.defs.jobs import EVALUATE_JOB
from mce_dagster.ingest import ingest_paths
from mce_dagster.prices import load_price_table
from mce_dagster.evaluation import RANGE_END, RANGE_START, QUIET_RUN_CONFIG
from test_ingest import row


@pytest.fixture(scope="module")
def kg(backend_kg):
    return backend_kg


@pytest.fixture(scope="module")
def defs(kg):
    # Built once the backend's environment is in place: the resources follow it.
    return build_definitions(*runtime())


@pytest.fixture(scope="module")
def sessions(kg, tmp_path_factory, real_traces):
    report = ingest_paths(sorted(real_traces.glob("*.json")), kg)
    # One more session whose LLM call records no usage: TokenCount fails on it.
    path = tmp_path_factory.mktemp("d") / "nousage.json"
    path.write_text(json.dumps([
        row("nu-wf", "a.workflow", session="no-usage", duration_ns=3_000_000_000),
        row("nu-llm", "x.chat", parent="nu-wf", session="no-usage", **{"gen_ai.request.model": "gpt-4o"}),
    ]))
    report2 = ingest_paths([path], kg)
    return report.sessions + report2.sessions


def test_asset_graph_is_the_metric_graph(defs):
    catalog, config = runtime()
    graph = defs.resolve_asset_graph()
    keys = {k for k in graph.get_all_asset_keys()}
    for metric in catalog.metrics.values():
        key = asset_key(metric.key)
        assert key in keys
        node = graph.get(key)
        assert node.group_name == metric.scope.value
        assert node.code_version == str(metric.definition.version)
        expected = {dg.AssetKey(["session_context"])} | {asset_key(d) for d in metric.dependencies}
        assert set(node.parent_keys) == expected
    avg = graph.get(dg.AssetKey(["Session", "AvgLLMCallDuration"]))
    assert dg.AssetKey(["LLMCall", "Duration"]) in avg.parent_keys
    job = defs.resolve_job_def(EVALUATE_JOB)
    assert job.partitions_def is not None and job.partitions_def.name == "sessions"


def run_batch(defs, instance, keys):
    instance.add_dynamic_partitions("sessions", [k for k in keys if not instance.has_dynamic_partition("sessions", k)])
    return defs.resolve_job_def(EVALUATE_JOB).execute_in_process(
        instance=instance, tags={RANGE_START: keys[0], RANGE_END: keys[-1]}, run_config=QUIET_RUN_CONFIG
    )


def test_one_run_over_a_batch_writes_what_the_functions_compute(defs, kg, sessions):
    instance = dg.DagsterInstance.ephemeral()
    result = run_batch(defs, instance, sessions)
    assert result.success
    catalog, config = runtime()
    plain = evaluate_all(list(config.enabled), kg.read_contexts(sessions), load_price_table())
    stored = {(r["sessionId"], r["scope"], r["name"], r["entityId"]): r for r in kg.read_results(sessions)}
    expected = {
        (sid, m.scope.value, m.name, eid): v
        for m in config.enabled
        for sid, by_entity in plain[m.key].values.items()
        for eid, v in by_entity.items()
    }
    assert expected, "the batch computed nothing"
    assert set(stored) == set(expected)
    for key, value in expected.items():
        assert stored[key]["result"] == pytest.approx(value.value, rel=1e-12), key
        # FalkorDB replies carry doubles to 15 significant digits.
        for part in ("numerator", "denominator"):
            want = getattr(value, part)
            assert stored[key].get(part) == (None if want is None else pytest.approx(want, rel=1e-12)), (key, part)
    # One materialization per (asset, session) in that single run.
    records = instance.fetch_materializations(dg.AssetKey(["Session", "Duration"]), limit=100).records
    assert sorted(r.partition_key for r in records) == sorted(sessions)
    assert {r.run_id for r in records} == {result.run_id}


def test_the_cli_reads_back_what_the_runs_wrote(defs, kg, sessions, mce_home, tmp_path):
    from test_cli import KEYS, mce

    sid = next(s for s in sessions if s != "no-usage")
    stored = {(r["scope"], r["name"], r["entityId"]): r["result"] for r in kg.read_results([sid])}
    assert stored, "an earlier test of this module evaluated the session"
    rows = json.loads(mce(mce_home, "kg", "metric", "get", sid, "--recursive", "--json", env={"DAGSTER_HOME": str(tmp_path)}).stdout)
    assert rows and all(KEYS <= set(r) for r in rows)
    assert {(r["scope"], r["metric"], r["entity_id"]): r["value"] for r in rows} == pytest.approx(stored)
    status = json.loads(mce(mce_home, "kg", "status", "--json").stdout)
    on_neo4j = type(kg.backend).__name__ == "Neo4jBackend"
    assert status["where"].startswith("Neo4j" if on_neo4j else "embedded FalkorDB"), status["where"]
    assert "OK" in mce(mce_home, "kg", "check").stdout


def test_a_failure_is_metadata_never_a_zero(defs, kg, sessions):
    instance = dg.DagsterInstance.ephemeral()
    result = run_batch(defs, instance, sessions)
    materializations = [
        e.event_specific_data.materialization
        for e in result.get_asset_materialization_events()
        if e.asset_key == dg.AssetKey(["LLMCall", "TokenCount"]) and e.partition == "no-usage"
    ]
    assert materializations and materializations[0].metadata["failed"].value == 1
    assert "records no token usage" in materializations[0].metadata["failures"].value
    errors = [e.user_message for e in instance.all_logs(result.run_id) if e.level == logging.ERROR]
    assert any("LLMCall/TokenCount failed on 1 of" in m for m in errors), errors
    stored = [r for r in kg.read_results(["no-usage"]) if r["name"] == "TokenCount" and r["scope"] == "LLMCall"]
    assert stored == []


def test_a_single_session_in_its_own_run_and_loading_across_runs(defs, kg, sessions):
    instance = dg.DagsterInstance.ephemeral()
    sid = sessions[0]
    instance.add_dynamic_partitions("sessions", [sid])
    before = [r for r in kg.read_results([sid]) if r["name"] == "WorkflowEfficiency"]
    # Only WorkflowEfficiency runs: its input, AgentToAgentInteractions, is loaded
    # from the graph, where an earlier run left it.
    result = dg.materialize(
        assets=list(defs.assets),
        selection=[dg.AssetKey(["session_context"]), dg.AssetKey(["Session", "WorkflowEfficiency"])],
        resources=defs.resources,
        instance=instance,
        partition_key=sid,
        run_config=QUIET_RUN_CONFIG,
    )
    assert result.success
    after = [r for r in kg.read_results([sid]) if r["name"] == "WorkflowEfficiency"]
    assert len(after) == 1 and after[0]["runId"] == result.run_id
    if before:
        assert after[0]["result"] == pytest.approx(before[0]["result"])
        assert after[0]["id"] == before[0]["id"]  # same version, same entity: replaced


def test_definitions_validate_from_the_dagster_cli(mce_home, tmp_path):
    # DAGSTER_HOME set, as in every documented command: otherwise Dagster would
    # read the production dagster.yaml of the working directory.
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    done = subprocess.run(
        [str(REPO / ".venv" / "bin" / "dagster"), "definitions", "validate", "-w", str(REPO / "workspace.yaml")],
        cwd=REPO, capture_output=True, text=True, timeout=180, env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Validation successful" in done.stderr + done.stdout


def test_the_python_client(kg, sessions, monkeypatch, tmp_path):
    from mce_dagster.client import MCEClient
    from mce_dagster.errors import UnknownSessionError

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    sid = "no-usage"
    with MCEClient() as client:
        assert client.compute_and_store(sid, metrics=["Session/Duration", "LLMCallCount"])
        rows = client.get_metrics(sid, metric_ids=["Duration", "LLMCallCount"])
        assert {r["metric"]: r["value"] for r in rows} == {"Duration": 3000.0, "LLMCallCount": 1.0}
        assert {r["scope"] for r in client.get_metrics(sid, recursive=True)} >= {"Session", "MASCall"}
        with pytest.raises(UnknownSessionError, match="not in the knowledge graph: nowhere"):
            client.compute_and_store("nowhere")


def test_the_webserver_serves_the_asset_graph(mce_home, tmp_path):
    """`dagster-webserver -w workspace.yaml` (what `dagster dev` serves) loads the
    code location and lists every metric asset over GraphQL (tests/test_ui.py goes
    through the whole UI)."""
    from dagster_ui import DagsterProcesses

    server = DagsterProcesses({**os.environ, "DAGSTER_HOME": str(tmp_path)}, tmp_path / "logs")
    server.start_webserver()
    try:
        server.wait_for_code_location(120)
        nodes = {"/".join(n["assetKey"]["path"]): n["groupName"] for n in server.graphql("{ assetNodes { assetKey { path } groupName } }")["assetNodes"]}
        catalog, _ = runtime()
        assert {asset_key(m.key).to_user_string() for m in catalog.metrics.values()} <= set(nodes)
        assert nodes["Session/WorkflowEfficiency"] == "Session" and nodes["LLMCall/Cost"] == "LLMCall"
    finally:
        server.stop()


def test_results_that_do_not_fit_are_rejected_with_the_reason():
    from mce_dagster.core.metric import MetricValue
    from mce_dagster.defs.io_managers import to_result_nodes

    metric = {"name": "Probe", "provider": "native", "scope": "Session", "version": 1, "asset": "Session/Probe", "value_range": [0, 1]}
    values = {"s": {"a": MetricValue(0.5), "b": MetricValue(float("nan")), "c": MetricValue(float("inf")), "d": MetricValue(2.0)}}
    nodes, rejected = to_result_nodes(metric, values, "run", 0.0)
    assert [n.entityId for n in nodes] == ["a"]
    reasons = dict(r.split(": ", 1) for r in rejected)
    assert "not a finite number" in reasons["Session/Probe on b (session s)"]
    assert "outside the metric's range" in reasons["Session/Probe on c (session s)"]
    assert "outside the metric's range" in reasons["Session/Probe on d (session s)"]
