"""Every deterministic metric on a hand-made session; each expected value is worked
out by hand in the comments."""

from __future__ import annotations

import pytest

from builders import SessionBuilder
from mce_dagster.catalog import load_catalog
from mce_dagster.core.evaluate import evaluate_all
from mce_dagster.core.metric import DependencyKey
from mce_dagster.core.metrics.interactions import agent_transitions, count_contiguous_cycles
from mce_dagster.core.ontology import Label, Scope
from mce_dagster.core.pricing import PriceTable

PRICES = PriceTable(
    {
        "gpt-4o": {"input_cost_per_token": 2.5e-6, "output_cost_per_token": 1e-5, "cache_read_input_token_cost": 1.25e-6},
        "gpt-3.5-turbo": {"input_cost_per_token": 5e-7, "output_cost_per_token": 1.5e-6},
    }
)


def build_session():
    b = SessionBuilder("s1")
    wf = b.add(Label.MAS_CALL, "wf", 0.0, 10.0, id="wf")
    a1 = b.add(Label.AGENT_CALL, "A", 0.5, 4.0, wf, id="a1")
    b.add(Label.LLM_CALL, "l1", 0.6, 1.6, a1, id="l1", modelName="gpt-4o",
          promptTokenCount=1000, completionTokenCount=200, totalTokenCount=1200, cacheReadTokenCount=400)
    b.add(Label.TOOL_CALL, "search", 1.7, 2.2, a1, id="t1", success=True)
    b.add(Label.TOOL_CALL, "search", 2.3, 2.5, a1, id="t2", success=False, errorMessage="timeout")
    c1 = b.add(Label.AGENT_CALL, "C", 2.6, 3.0, a1, id="c1")
    b.add(Label.LLM_CALL, "l2", 2.7, 2.9, c1, id="l2", modelName="gpt-3.5-turbo",
          promptTokenCount=100, completionTokenCount=50)
    b1 = b.add(Label.AGENT_CALL, "B", 4.5, 7.0, wf, id="b1")
    b.add(Label.LLM_CALL, "l3", 4.6, 5.6, b1, id="l3", modelName="acme-7b",
          promptTokenCount=10, completionTokenCount=10, totalTokenCount=20, success=False)
    b.add(Label.TOOL_CALL, "fetch", 5.7, 6.0, b1, id="t3")
    a2 = b.add(Label.AGENT_CALL, "A", 7.5, 9.0, wf, id="a2")
    b.add(Label.LLM_CALL, "l4", 7.6, 8.6, a2, id="l4", modelName="gpt-4o")  # no usage recorded
    b.add(Label.SPAN, "POST", 6.5, 10.5, b1, id="http")  # not a call, but part of the session's extent
    return b.build()


@pytest.fixture(scope="module")
def results():
    catalog = load_catalog()
    ctx = build_session()
    batches = evaluate_all(catalog.ordered(), {"s1": ctx}, PRICES)
    return batches


def value(results, scope: Scope, name: str, entity: str):
    batch = results[DependencyKey(scope, name)]
    return batch.values["s1"].get(entity)


def failed(results, scope: Scope, name: str) -> dict[str, str]:
    return {f.entity_id: f.reason for f in results[DependencyKey(scope, name)].failures}


def test_duration(results):
    # Session: latest end 10.5 (the POST span) - earliest start 0.0, in ms.
    assert value(results, Scope.SESSION, "Duration", "s1").value == pytest.approx(10500.0)
    assert value(results, Scope.LLM_CALL, "Duration", "l2").value == pytest.approx(200.0)
    assert value(results, Scope.AGENT_CALL, "Duration", "a1").value == pytest.approx(3500.0)


def test_token_count(results):
    assert value(results, Scope.LLM_CALL, "TokenCount", "l1").value == 1200  # recorded total
    assert value(results, Scope.LLM_CALL, "TokenCount", "l2").value == 150  # 100 + 50, no total recorded
    assert "l4" in failed(results, Scope.LLM_CALL, "TokenCount")  # no usage: a failure, not a 0
    assert value(results, Scope.LLM_CALL, "TokenCount", "l4") is None
    # A sum over a call that records no usage is not the session's usage: it fails
    # naming the call, never a partial sum (1200 + 150 + 20) stored as if whole.
    assert value(results, Scope.SESSION, "TokenCount", "s1") is None
    reason = failed(results, Scope.SESSION, "TokenCount")["s1"]
    assert "1 of 4 LLM calls beneath record no token usage" in reason and "l4" in reason
    # a1 reaches l1 and, through the nested agent c1, l2.
    assert value(results, Scope.AGENT_CALL, "TokenCount", "a1").value == 1350
    assert value(results, Scope.AGENT_CALL, "TokenCount", "b1").value == 20


def test_a_failed_call_without_usage_is_not_applicable_not_a_failure():
    b = SessionBuilder("s2")
    wf = b.add(Label.MAS_CALL, "wf", 0.0, 3.0, id="wf")
    b.add(Label.LLM_CALL, "ok", 0.1, 1.0, wf, id="ok", modelName="gpt-4o", promptTokenCount=100, completionTokenCount=10)
    b.add(Label.LLM_CALL, "429", 1.1, 1.2, wf, id="rate-limited", modelName="gpt-4o", success=False)
    batches = evaluate_all(load_catalog().ordered(), {"s2": b.build()}, PRICES)
    for name in ("TokenCount", "Cost"):
        batch = batches[DependencyKey(Scope.LLM_CALL, name)]
        assert "rate-limited" not in batch.values["s2"] and not batch.failures
        assert batch.not_applicable == 1
    session = batches[DependencyKey(Scope.SESSION, "TokenCount")].values["s2"]["s2"]
    assert session.value == 110 and session.metadata["llm_calls_without_usage"] == 1


def test_cost(results):
    # l1: (1000-400) x 2.5e-6 + 400 x 1.25e-6 (cache) + 200 x 1e-5 = 0.0015 + 0.0005 + 0.002
    assert value(results, Scope.LLM_CALL, "Cost", "l1").value == pytest.approx(0.004)
    # l2: 100 x 5e-7 + 50 x 1.5e-6
    assert value(results, Scope.LLM_CALL, "Cost", "l2").value == pytest.approx(1.25e-4)
    # l3: acme-7b is not in the table: priced as gpt-4o, and says so.
    l3 = value(results, Scope.LLM_CALL, "Cost", "l3")
    assert l3.value == pytest.approx(10 * 2.5e-6 + 10 * 1e-5)
    assert l3.metadata["priced_as"] == "gpt-4o" and "acme-7b" in l3.reasoning
    # b1 holds l3 only: its sum says which model was priced as another.
    b1 = value(results, Scope.AGENT_CALL, "Cost", "b1")
    assert b1.value == pytest.approx(1.25e-4) and b1.metadata["priced_as"] == {"acme-7b": "gpt-4o"}
    # The session holds l4, which records no usage: its cost is not known.
    assert value(results, Scope.SESSION, "Cost", "s1") is None
    assert "l4" in failed(results, Scope.SESSION, "Cost")["s1"]


def test_counts(results):
    assert value(results, Scope.SESSION, "LLMCallCount", "s1").value == 4
    assert value(results, Scope.SESSION, "ToolCallCount", "s1").value == 3
    assert value(results, Scope.SESSION, "AgentCallCount", "s1").value == 4
    assert value(results, Scope.MAS_CALL, "AgentCallCount", "wf").value == 4
    assert value(results, Scope.AGENT_CALL, "LLMCallCount", "a1").value == 2
    assert value(results, Scope.AGENT_CALL, "AgentCallCount", "a1").value == 1  # c1, not itself
    assert value(results, Scope.AGENT_CALL, "ToolCallCount", "b1").value == 1


def test_tool_errors(results):
    assert value(results, Scope.TOOL_CALL, "ToolError", "t1").value == 0.0
    assert value(results, Scope.TOOL_CALL, "ToolError", "t2").value == 1.0
    assert value(results, Scope.TOOL_CALL, "ToolError", "t3").value == 0.0  # status unknown is not a failure
    rate = value(results, Scope.SESSION, "ToolErrorRate", "s1")
    assert (rate.value, rate.numerator, rate.denominator) == (pytest.approx(1 / 3), 1.0, 3.0)
    assert rate.metadata["status_unknown"] == 1
    a1 = value(results, Scope.AGENT_CALL, "ToolErrorRate", "a1")
    assert (a1.numerator, a1.denominator) == (1.0, 2.0)
    # a2 has no tool call: not applicable, so no result and no failure.
    assert value(results, Scope.AGENT_CALL, "ToolErrorRate", "a2") is None
    assert "a2" not in failed(results, Scope.AGENT_CALL, "ToolErrorRate")
    assert results[DependencyKey(Scope.AGENT_CALL, "ToolErrorRate")].not_applicable == 2  # a2 and c1


def test_llm_error_rate(results):
    session = value(results, Scope.SESSION, "LLMErrorRate", "s1")
    assert (session.numerator, session.denominator) == (1.0, 4.0)
    assert value(results, Scope.AGENT_CALL, "LLMErrorRate", "b1").value == 1.0


def test_interactions(results):
    # Agents by start: A, C, B, A -> A->C, C->B, B->A.
    a2a = value(results, Scope.SESSION, "AgentToAgentInteractions", "s1")
    assert a2a.value == 3
    assert a2a.metadata["transitions"] == {"A -> C": 1, "B -> A": 1, "C -> B": 1}
    efficiency = value(results, Scope.SESSION, "WorkflowEfficiency", "s1")
    assert (efficiency.numerator, efficiency.denominator) == (3.0, 3.0)
    a2t = value(results, Scope.SESSION, "AgentToToolInteractions", "s1")
    assert a2t.value == 3
    assert a2t.metadata["interactions"] == {"A -> search": 2, "B -> fetch": 1}
    # A, search, search, C, B, fetch, A: no block of two or more repeats.
    assert value(results, Scope.SESSION, "CyclesCount", "s1").value == 0


def test_aggregates(results):
    # LLM call durations: 1000, 200, 1000, 1000 ms.
    avg = value(results, Scope.SESSION, "AvgLLMCallDuration", "s1")
    assert avg.value == pytest.approx(800.0)
    assert (avg.numerator, avg.denominator) == (pytest.approx(3200.0), 4.0)
    assert value(results, Scope.SESSION, "MinLLMCallDuration", "s1").value == pytest.approx(200.0)
    assert value(results, Scope.SESSION, "MaxLLMCallDuration", "s1").value == pytest.approx(1000.0)
    assert value(results, Scope.SESSION, "SumToolError", "s1").value == 1.0
    # Average token count over the three LLM calls that have one; l4 is named as missing.
    avg_tokens = value(results, Scope.SESSION, "AvgLLMCallTokenCount", "s1")
    assert avg_tokens.value == pytest.approx((1200 + 150 + 20) / 3)
    assert "1 of 4" in avg_tokens.reasoning


@pytest.mark.parametrize(
    "sequence, cycles",
    [
        ("ATAT", 1),
        ("ABCABCABC", 2),  # the block came back twice
        ("ABABAB", 2),
        ("ATATATAT", 3),
        ("XABABY", 1),
        ("XABABABY", 2),
        ("ABCABCAB", 1),  # the third ABC is cut short
        ("AAA", 0),  # blocks have length two or more
        ("AAAA", 1),  # AA then AA; the two left are too few for another block
        ("AAAAAA", 2),  # AA three times in a row
        ("ABCD", 0),
        ("", 0),
    ],
)
def test_cycles_count_examples(sequence, cycles):
    assert count_contiguous_cycles(list(sequence)) == cycles


def test_cycles_count_on_a_session():
    # Session: agents A,B,C three times over (the pipeline ran again twice), then D,
    # whose tools go search,fetch,search,fetch: the names in start order are
    # A,B,C,A,B,C,A,B,C,D,search,fetch,search,fetch: 2 cycles + 1 cycle.
    b = SessionBuilder("s4")
    for i, name in enumerate("ABCABCABC"):
        b.add(Label.AGENT_CALL, name, float(i), i + 0.5)
    d = b.add(Label.AGENT_CALL, "D", 10.0, 20.0, id="d")
    for i, tool in enumerate(["search", "fetch", "search", "fetch"]):
        b.add(Label.TOOL_CALL, tool, 11.0 + i, 11.5 + i, d)
    catalog = load_catalog()
    assert catalog.find("CyclesCount").version == 2  # results of the 2k rule (version 1) stay as history
    batches = evaluate_all(catalog.resolve("CyclesCount"), {"s4": b.build()}, PRICES)
    assert batches[DependencyKey(Scope.SESSION, "CyclesCount")].values["s4"]["s4"].value == 3
    by_agent = batches[DependencyKey(Scope.AGENT_CALL, "CyclesCount")].values["s4"]
    assert by_agent["d"].value == 1 and by_agent["d"].metadata == {"sequence_length": 4}


def test_workflow_efficiency_example():
    # A,B,A,Z,A,B,A: transitions AB BA AZ ZA AB BA, 4 distinct of 6.
    b = SessionBuilder("s2")
    for i, name in enumerate("ABAZABA"):
        b.add(Label.AGENT_CALL, name, float(i), i + 0.5)
    ctx = b.build()
    assert agent_transitions(ctx.calls(Label.AGENT_CALL)) == [
        ("A", "B"), ("B", "A"), ("A", "Z"), ("Z", "A"), ("A", "B"), ("B", "A")
    ]
    catalog = load_catalog()
    batches = evaluate_all(catalog.closure([DependencyKey(Scope.SESSION, "WorkflowEfficiency")]), {"s2": ctx}, PRICES)
    efficiency = batches[DependencyKey(Scope.SESSION, "WorkflowEfficiency")].values["s2"]["s2"]
    assert (efficiency.value, efficiency.numerator, efficiency.denominator) == (pytest.approx(4 / 6), 4.0, 6.0)


def test_workflow_efficiency_not_applicable_without_transitions():
    b = SessionBuilder("s3")
    b.add(Label.AGENT_CALL, "A", 0.0, 1.0)
    b.add(Label.AGENT_CALL, "A", 1.0, 2.0)  # a repeat collapses: no transition
    catalog = load_catalog()
    batches = evaluate_all(catalog.ordered(), {"s3": b.build()}, PRICES)
    batch = batches[DependencyKey(Scope.SESSION, "WorkflowEfficiency")]
    assert batch.values["s3"] == {} and batch.not_applicable == 1 and not batch.failures
