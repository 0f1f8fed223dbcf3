"""The engine on the knowledge graph the platform writes: the four real traces and
synthetic sessions written into Neo4j by the OXP platform's own normalizer and
writer (../shared/oxp/write_graph.py, run as it is), evaluated, and compared with
the same traces through `mce ingest` and with plain Python over the same graph."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from mce_dagster.catalog import load_catalog
from mce_dagster.core.evaluate import evaluate_all
from mce_dagster.core.metric import DependencyKey
from mce_dagster.core.ontology import Label, Scope
from mce_dagster.ingest import ingest_paths
from mce_dagster.prices import load_price_table
from mce_dagster.synthetic import write_export

from conftest import REPO, require
from platform_compare import deterministic_metrics, differences, outcomes, shared_entities

WRITE_GRAPH = REPO.parent / "shared" / "oxp" / "write_graph.py"
TRACES = ["multi_agent_supervisor.json", "api_noa_2.json", "gls_linear.json", "llm_single_session.json"]
# What the normalizer loses of a trace can show only in these: it writes no tool
# span named by `traceloop.entity.name`.
TOOL_DERIVED = {
    "ToolCallCount", "ToolErrorRate", "CyclesCount", "AgentToToolInteractions", "SumToolError",
    "AvgToolCallDuration", "MinToolCallDuration", "MaxToolCallDuration",
}
pytestmark = [pytest.mark.service, pytest.mark.realdata]


def rows_of(path):
    data = json.loads(path.read_text())
    return data if isinstance(data, list) else [r for rows in data.values() for r in rows]


def unread_tools(paths) -> dict[str, int]:
    """Bare session id -> tool spans the normalizer cannot read (no ioa_observe name)."""
    out: Counter[str] = Counter()
    for path in paths:
        for r in rows_of(path):
            a = r["SpanAttributes"]
            sid = a.get("session.id") or a.get("execution.id")
            if r["SpanName"].endswith(".tool") and not a.get("ioa_observe.entity.name"):
                out[sid.rsplit("_", 1)[-1]] += 1
    return dict(out)


@pytest.fixture(scope="module")
def sources(real_traces, tmp_path_factory):
    require(WRITE_GRAPH.is_file(), f"the platform's writer is not at {WRITE_GRAPH}")
    synthetic = tmp_path_factory.mktemp("platform") / "synthetic.json"
    write_export(synthetic, 12, seed=21)
    return [real_traces / f for f in TRACES] + [synthetic]


def _drop_schema(backend) -> None:
    for r in backend.query("SHOW CONSTRAINTS YIELD name"):
        backend.query(f"DROP CONSTRAINT `{r['name']}` IF EXISTS")
    for r in backend.query("SHOW INDEXES YIELD name, type WHERE type <> 'LOOKUP'"):
        backend.query(f"DROP INDEX `{r['name']}` IF EXISTS")


@pytest.fixture(scope="module")
def written(neo4j_env, sources):
    """What the platform's writer printed: raw session id -> what it wrote. The
    database starts as a platform's does, with no schema of this project's; after
    the module it gets this project's schema back for the modules that follow."""
    from mce_dagster.graph import open_graph
    from mce_dagster.graph.cypher import index_statements

    backend = open_graph().backend
    _drop_schema(backend)
    env = {**os.environ, **neo4j_env}
    done = subprocess.run(
        [sys.executable, str(WRITE_GRAPH), "--execution-id-fallback", "--neo4j", env["NEO4J_URI"],
         "--user", env.get("NEO4J_USERNAME", "neo4j"), "--password", env["NEO4J_PASSWORD"], *map(str, sources)],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    yield json.loads(done.stdout)
    backend.query("MATCH (n) WITH n LIMIT 100000 DETACH DELETE n RETURN count(*) AS n")
    _drop_schema(backend)
    backend.ensure_indexes(index_statements("neo4j"))


@pytest.fixture(scope="module")
def platform(written):
    from mce_dagster.graph import open_graph

    kg = open_graph()
    contexts = kg.read_contexts(kg.session_ids())
    assert len(contexts) == sum(bool(w["session_nodes"]) for w in written.values())
    return kg, contexts, evaluate_all(deterministic_metrics(load_catalog()), contexts, load_price_table())


@pytest.fixture(scope="module")
def own(embedded_kg, sources):
    report = ingest_paths(sources, embedded_kg)
    contexts = embedded_kg.read_contexts(report.sessions)
    return contexts, evaluate_all(deterministic_metrics(load_catalog()), contexts, load_price_table())


def test_no_stored_value_differs_from_own_ingest_but_for_tools_the_normalizer_drops(platform, own, sources):
    _, p_ctx, p_batches = platform
    o_ctx, o_batches = own
    unread = unread_tools(sources)
    mine, theirs = outcomes(o_ctx, o_batches), outcomes(p_ctx, p_batches)
    diffs = differences(mine, theirs, shared_entities(o_ctx, p_ctx))
    for session, metric, entity, a, b in diffs:
        # Fewer tool calls seen, in a session whose trace has tool spans the normalizer drops.
        assert metric.split("/")[1] in TOOL_DERIVED and unread.get(session), (session, metric, entity, a, b)
    # The comparison compared: most of what both graphs hold agrees.
    same = [k for k, b in theirs.items() if b.kind == "value" and k in mine and mine[k].kind == "value" and mine[k].value == pytest.approx(b.value)]
    assert len(same) > 300 and len(same) > 5 * len(diffs)


def test_defaults_of_the_normalizer_are_failures_with_a_reason_not_zeros(platform):
    _, contexts, batches = platform
    for sid in contexts:
        for name, words in [("TokenCount", "record no token usage"), ("Cost", "record no prompt/completion"),
                            ("Duration", "parent span the graph does not hold")]:
            batch = batches[DependencyKey(Scope.SESSION, name)]
            if sid in batch.values and sid in batch.values[sid]:
                continue  # a synthetic session records the usage under the names the normalizer reads
            reasons = [f.reason for f in batch.failures if f.session_id == sid]
            assert reasons and words in reasons[0], (sid, name, reasons)
    tokens = batches[DependencyKey(Scope.LLM_CALL, "TokenCount")]
    assert all(v.value > 0 for values in tokens.values.values() for v in values.values())
    # The MASCall the normalizer makes up has no span to time: not applicable, never 0.
    mas = batches[DependencyKey(Scope.MAS_CALL, "Duration")]
    assert not any(values for values in mas.values.values()) and mas.not_applicable == len(contexts)


def test_hand_offs_cycles_and_counts_per_agent_against_plain_python(platform):
    kg, contexts, batches = platform
    rows = kg.backend.query(
        "MATCH (c:AgentCall)-[:executesAgent]->(a:Agent) RETURN c.sessionId AS s, c.id AS id, a.name AS name, "
        "c.startTime AS start, c.endTime AS end ORDER BY c.startTime, c.id"
    )
    llm = kg.backend.query("MATCH (l:LLMCall) RETURN l.sessionId AS s, l.startTime AS start, l.endTime AS end")
    agents: dict[str, list[dict]] = {}
    for r in rows:
        agents.setdefault(r["s"], []).append(r)
    checked = 0
    for sid, calls in agents.items():
        names = [c["name"] for c in calls]
        collapsed = [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]
        a2a = batches[DependencyKey(Scope.SESSION, "AgentToAgentInteractions")].values[sid][sid]
        assert a2a.value == len(collapsed) - 1, sid
        # No tool call of these sessions reaches the graph: the cycles are the agents'.
        cycles, i = 0, 0
        while i < len(names):
            k = next((k for k in range(2, (len(names) - i) // 2 + 1) if names[i:i + k] == names[i + k:i + 2 * k]), None)
            cycles, i = (cycles + 1, i + k) if k else (cycles, i + 1)
        assert batches[DependencyKey(Scope.SESSION, "CyclesCount")].values[sid][sid].value == cycles, sid
        per_agent = batches[DependencyKey(Scope.AGENT_CALL, "LLMCallCount")]
        for c in calls:
            inside = [x for x in llm if x["s"] == sid and c["start"] - 1e-6 <= x["start"] and x["end"] <= c["end"] + 1e-6]
            overlapping = [x for x in llm if x["s"] == sid and x["start"] < c["end"] and c["start"] < x["end"]]
            stored = per_agent.values[sid].get(c["id"])
            if len(inside) == len(overlapping):
                assert stored is not None and stored.value == len(inside), (sid, c["name"])
                checked += 1
            else:
                assert stored is None and c["id"] in per_agent.not_applicable_ids[sid]
    assert checked >= 20


def test_raw_ids_resolve_and_calls_without_a_session_are_reported(platform, written, neo4j_env):
    kg, contexts, _ = platform
    raw = {r: w["session_nodes"][0] for r, w in written.items() if w["session_nodes"]}
    assert kg.resolve_sessions(list(raw)) == raw
    orphan_raw = [r for r, w in written.items() if not w["session_nodes"]]
    assert len(orphan_raw) == 1  # llm_single_session: no agent span, so no Session node
    orphans = kg.calls_without_session()
    assert set(orphans) == {orphan_raw[0].rsplit("_", 1)[-1]} and orphans[orphan_raw[0].rsplit("_", 1)[-1]] == {"LLMCall": 2, "ToolCall": 1}
    env = {**os.environ, **neo4j_env}
    mce = str(REPO / ".venv" / "bin" / "mce") if (REPO / ".venv" / "bin" / "mce").exists() else "mce"
    status = subprocess.run([mce, "kg", "status"], capture_output=True, text=True, env=env, timeout=120)
    assert "calls without a session: 3" in status.stdout, status.stdout + status.stderr
    check = subprocess.run([mce, "kg", "check"], capture_output=True, text=True, env=env, timeout=120)
    assert check.returncode == 0 and "not in the graph" not in check.stdout, check.stdout + check.stderr
    one = next(r for r in raw if r.startswith("noa-moderator_"))
    done = subprocess.run([mce, "compute", one, "--metrics", "LLMCallCount", "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    stored = [r for r in kg.read_results([raw[one]]) if r["name"] == "LLMCallCount" and r["scope"] == "Session"]
    assert [r["result"] for r in stored] == [7.0]
    # The trace with no agent span: its raw id is not a session, and the error says
    # the graph holds its calls.
    refused = subprocess.run([mce, "compute", orphan_raw[0]], capture_output=True, text=True, env=env, timeout=300)
    assert refused.returncode == 1 and "3 of " in refused.stderr and "no Session node" in refused.stderr, refused.stderr
    got = subprocess.run([mce, "kg", "metric", "get", one, "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert got.returncode == 0 and any(r["metric"] == "LLMCallCount" for r in json.loads(got.stdout))


def test_the_writers_indexes_are_reported_as_missing_constraints(platform):
    from mce_dagster.graph.cypher import index_statements

    kg, _, _ = platform
    kg.backend.ensure_indexes(index_statements("neo4j"))  # as a backend opened now does
    problems = kg.backend.schema_problems
    assert "Session.id" in problems and "IndexAlreadyExists" in problems["Session.id"]
    # MetricResult has no index of the writer's: its constraint holds, results are created.
    assert f"{Label.METRIC_RESULT}.id" not in problems and kg.backend.enforces_unique_ids


def _sensor_keys():
    """The assets a sensor's request covers: the session context and every enabled
    metric's. Built here, not from `mce_dagster.definitions`, whose import would
    build the process's definitions under this module's Neo4j settings."""
    from mce_dagster.catalog import load_catalog
    from mce_dagster.config import load_config
    from mce_dagster.defs.assets import SESSION_CONTEXT_KEY, asset_key

    config = load_config(load_catalog())
    return [SESSION_CONTEXT_KEY, *(asset_key(m.key) for m in config.enabled if m.scope is not Scope.POPULATION)]


def test_the_queue_sensor_takes_the_raw_ids_the_platform_announces(platform, written, monkeypatch):
    import uuid

    import dagster as dg

    from mce_dagster import queue as q
    from mce_dagster.defs.sensors import QueueCursor, queue_tick
    from mce_dagster.settings import Settings

    kg, _, _ = platform
    name = f"test_platform_{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("MCE_SESSION_QUEUE", name)
    settings = Settings.from_env()
    try:
        connection = q.connect(settings, timeout=3)
    except Exception:
        connection = None
    require(connection is not None, "RabbitMQ does not answer (run `eval \"$(make -s services)\"`)")
    connection.close()
    raw = {r: w["session_nodes"][0] for r, w in written.items() if w["session_nodes"]}
    orphan = next(r for r, w in written.items() if not w["session_nodes"])
    try:
        with q.channel(settings) as ch:
            q.declare(ch, name)
            for r in [*raw, orphan, next(iter(raw))]:  # the last: a repeat
                q.publish(ch, name, q.announcement(r))
        with dg.instance_for_test() as instance:
            report, result = queue_tick(instance, kg, settings, QueueCursor(), asset_keys=_sensor_keys())
        # Partitions are keyed by the stored (bare) ids, each once; the session with
        # no Session node waits in the queue as any not yet written would.
        assert sorted(report.requested) == sorted(raw.values())
        added = [k for r in result.dynamic_partitions_requests for k in r.partition_keys]
        assert sorted(added) == sorted(raw.values())
        assert report.republished == 1 and report.dead_lettered == 0
    finally:
        with q.channel(settings) as ch:
            ch.queue_delete(name)
            ch.queue_delete(q.dlq_name(name))


def test_the_poll_sensor_reaches_the_platforms_sessions_and_names_the_orphan_calls(platform, written):
    import dagster as dg

    from mce_dagster.defs.sensors import PollCursor, poll_tick
    from mce_dagster.settings import Settings

    kg, _, _ = platform
    bare = sorted(w["session_nodes"][0] for w in written.values() if w["session_nodes"])
    with dg.instance_for_test() as instance:
        requested, result, note = poll_tick(instance, kg, Settings.from_env(), PollCursor(), asset_keys=_sensor_keys())
    # The normalizer sets no ingestedAt: the sensor stamps it, and so finds them all.
    assert sorted(requested) == bare
    orphan = next(r for r, w in written.items() if not w["session_nodes"]).rsplit("_", 1)[-1]
    assert note is not None and "3 call(s)" in note and orphan in note
    assert kg.stamp_unseen_sessions(100) == 0  # stamped once


def test_rest_and_mcp_answer_for_the_raw_id(platform, written, neo4j_env, tmp_path, monkeypatch):
    """After an evaluation, the raw id the platform passes reaches the session's
    results through the REST API and the MCP server's query tool."""
    from fastapi.testclient import TestClient

    from mce_dagster.serve.api import build_app
    from mce_dagster.serve.mcp_server import build_server

    kg, _, _ = platform
    one = next(r for r, w in written.items() if r.startswith("noa-moderator_"))
    bare = written[one]["session_nodes"][0]
    env = {**os.environ, **neo4j_env}
    mce = str(REPO / ".venv" / "bin" / "mce") if (REPO / ".venv" / "bin" / "mce").exists() else "mce"
    done = subprocess.run([mce, "compute", one, "--metrics", "LLMCallCount"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    monkeypatch.setenv("MCE_HOME", str(tmp_path))  # where query_metric keeps its answers
    rows = TestClient(build_app()).get(f"/sessions/{one}/metrics").json()
    assert any(r["metric"] == "LLMCallCount" and r["value"] == 7.0 for r in rows), rows
    assert TestClient(build_app()).get(f"/sessions/{one}x/metrics").status_code == 404
    import asyncio

    async def ask():
        return await build_server().call_tool("query_metric", {"metric": "LLMCallCount", "session_id": one})

    answer = asyncio.run(ask())
    text = json.dumps(answer, default=str)
    assert bare in text and "7" in text, text[:2000]


def test_mce_compute_through_dagster_stores_exactly_what_the_graph_supports(platform, neo4j_env):
    """`mce compute --all` (Dagster's assets, the IO manager, Neo4j) on the platform's
    graph stores every value the pure evaluation gives and nothing else: no failed or
    not-applicable metric becomes a stored number, and the failures are reported."""
    kg, contexts, batches = platform
    env = {**os.environ, **neo4j_env}
    mce = str(REPO / ".venv" / "bin" / "mce") if (REPO / ".venv" / "bin" / "mce").exists() else "mce"
    done = subprocess.run([mce, "compute", "--all", "--json"], capture_output=True, text=True, env=env, timeout=900)
    # Failed entities (no usage recorded, a dropped root span) make the exit status 1.
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    outcome = json.loads(done.stdout)
    assert outcome["sessions"] == len(contexts) and outcome["failed_runs"] == []
    from mce_dagster.config import load_config

    enabled = {m.key for m in load_config(load_catalog()).enabled}
    expected_failed: Counter[str] = Counter()
    expected: dict[tuple[str, str, str, str], float] = {}
    for key, batch in batches.items():
        if key.scope is Scope.POPULATION or key not in enabled:
            continue
        if batch.failures:
            expected_failed[f"{key.scope.value}/{key.name}"] += len(batch.failures)
        for sid, values in batch.values.items():
            for eid, v in values.items():
                expected[(sid, key.scope.value, key.name, eid)] = v.value
    stored = {
        (r["sessionId"], r["scope"], r["name"], r["entityId"]): r["result"]
        for r in kg.read_results(list(contexts)) if r["provider"] == "native"
    }
    assert not set(expected) - set(stored), Counter((k[1], k[2]) for k in set(expected) - set(stored))
    assert not set(stored) - set(expected), sorted(set(stored) - set(expected))[:10]
    assert all(stored[k] == pytest.approx(v) for k, v in expected.items())
    assert sum(outcome["failed_entities"].values()) == sum(expected_failed.values()) > 0, (outcome["failed_entities"], expected_failed)
