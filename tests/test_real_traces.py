"""The four real traces of ../shared: counts, durations and token totals that this
test works out from the files on its own, against what the engine computes after
a round trip through the graph."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from mce_dagster.catalog import load_catalog
from mce_dagster.core.evaluate import evaluate_all
from mce_dagster.core.metric import DependencyKey
from mce_dagster.core.ontology import Label, Scope
from mce_dagster.ingest import ingest_paths
from mce_dagster.prices import bundled_table_path, load_price_table

FILES = ["multi_agent_supervisor.json", "api_noa_2.json", "gls_linear.json", "llm_single_session.json"]


def rows_of(path):
    data = json.loads(path.read_text())
    return data if isinstance(data, list) else [r for rows in data.values() for r in rows]


def epoch(ts: str) -> Decimal:
    """Independent of the engine's parser: Decimal seconds, any number of digits."""
    ts = ts.rstrip("Z").replace(" ", "T")
    whole, _, frac = ts.partition(".")
    base = datetime.fromisoformat(whole).replace(tzinfo=timezone.utc).timestamp()
    return Decimal(int(base)) + (Decimal("0." + frac) if frac else Decimal(0))


def expected(path):
    rows = rows_of(path)
    session = {r["SpanAttributes"].get("session.id") or r["SpanAttributes"].get("execution.id") for r in rows}
    assert len(session) == 1
    starts = [epoch(r["Timestamp"]) for r in rows]
    ends = [s + Decimal(int(r["Duration"])) / Decimal(10**9) for s, r in zip(starts, rows)]
    llm = [r for r in rows if r["SpanName"].endswith(".chat")]
    return {
        "session": session.pop(),
        "duration_ms": float((max(ends) - min(starts)) * 1000),
        "llm_calls": len(llm),
        "tool_calls": sum(r["SpanName"].endswith(".tool") for r in rows),
        "agent_calls": sum(r["SpanName"].endswith(".agent") for r in rows),
        "tokens": sum(int(r["SpanAttributes"]["llm.usage.total_tokens"]) for r in llm),
        "prompt": sum(int(r["SpanAttributes"]["gen_ai.usage.prompt_tokens"]) for r in llm),
        "llm_durations_ms": sorted(int(r["Duration"]) / 1e6 for r in llm),
    }


@pytest.fixture(scope="module")
def kg(backend_kg):
    """Every test of this module runs on the embedded FalkorDB and on Neo4j."""
    return backend_kg


@pytest.fixture(scope="module")
def computed(real_traces, kg):
    report = ingest_paths([real_traces / f for f in FILES], kg)
    assert not report.problems and not report.file_errors
    contexts = kg.read_contexts(report.sessions)
    batches = evaluate_all(load_catalog().ordered(), contexts, load_price_table())
    return report, contexts, batches


def session_value(batches, name, session):
    return batches[DependencyKey(Scope.SESSION, name)].values[session][session]


@pytest.mark.parametrize("file", FILES)
def test_real_trace(file, real_traces, computed):
    report, contexts, batches = computed
    want = expected(real_traces / file)
    sid = want["session"]
    assert sid in report.sessions
    assert session_value(batches, "Duration", sid).value == pytest.approx(want["duration_ms"], abs=1e-3)
    assert session_value(batches, "LLMCallCount", sid).value == want["llm_calls"]
    assert session_value(batches, "ToolCallCount", sid).value == want["tool_calls"]
    assert session_value(batches, "AgentCallCount", sid).value == want["agent_calls"]
    tokens = session_value(batches, "TokenCount", sid)
    assert tokens.value == want["tokens"] and tokens.metadata["prompt"] == want["prompt"]
    llm_durations = sorted(v.value for v in batches[DependencyKey(Scope.LLM_CALL, "Duration")].values[sid].values())
    assert llm_durations == pytest.approx(want["llm_durations_ms"])
    # Every LLM call of these traces has a model in the price table: no fallback.
    cost = session_value(batches, "Cost", sid)
    assert cost.value > 0 and "priced_as" not in cost.metadata


def test_real_costs_from_the_table(real_traces, computed):
    # gls_linear: nine gpt-4o-2024-08-06 calls, no cached tokens.
    _, _, batches = computed
    rows = [r for r in rows_of(real_traces / "gls_linear.json") if r["SpanName"].endswith(".chat")]
    table = json.loads(bundled_table_path().read_text())
    price = table["gpt-4o-2024-08-06"]
    want = sum(
        int(r["SpanAttributes"]["gen_ai.usage.prompt_tokens"]) * price["input_cost_per_token"]
        + int(r["SpanAttributes"]["gen_ai.usage.completion_tokens"]) * price["output_cost_per_token"]
        for r in rows
    )
    sid = expected(real_traces / "gls_linear.json")["session"]
    assert session_value(batches, "Cost", sid).value == pytest.approx(want, rel=1e-12)


def test_agents_own_their_calls_in_detached_agent_traces(real_traces, computed):
    # gls_linear records each agent in a trace of its own; its LLM calls carry
    # agent_id. Every LLM call must be reached by exactly the agent named.
    _, contexts, batches = computed
    rows = rows_of(real_traces / "gls_linear.json")
    per_agent: dict[str, int] = {}
    for r in rows:
        if r["SpanName"].endswith(".chat"):
            per_agent[r["SpanAttributes"]["agent_id"]] = per_agent.get(r["SpanAttributes"]["agent_id"], 0) + 1
    sid = expected(real_traces / "gls_linear.json")["session"]
    counts = batches[DependencyKey(Scope.AGENT_CALL, "LLMCallCount")].values[sid]
    agents = {a.id: a.props["agentName"] for a in contexts[sid].calls(Label.AGENT_CALL)}
    got: dict[str, int] = {}
    for agent_id, value in counts.items():
        if value.value:
            got[agents[agent_id]] = got.get(agents[agent_id], 0) + int(value.value)
    assert got == per_agent
