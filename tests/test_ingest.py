"""Span rows -> ontology: parsing, placement rules, reported problems, idempotency."""

from __future__ import annotations

import json

import pytest

from mce_dagster.core.ontology import Label, Rel
from mce_dagster.ingest import build_graphs, collect_spans, IngestReport, ingest_paths
from mce_dagster.ingest.mapping import build_session_graph, synthetic_mas_id
from mce_dagster.ingest.spans import RowError, parse_row, parse_timestamp


def row(span_id, name, parent="", start="2025-01-01T00:00:00Z", duration_ns=1_000_000_000, session="s1", trace="t1", status="Unset", events=None, **attrs):
    return {
        "Timestamp": start,
        "TraceId": trace,
        "SpanId": span_id,
        "ParentSpanId": parent,
        "SpanName": name,
        "SpanKind": "Internal",
        "ServiceName": "app",
        "SpanAttributes": {"session.id": session, **attrs},
        "Duration": duration_ns,
        "StatusCode": status,
        "StatusMessage": "",
        "EventsName": [e[0] for e in events or []],
        "EventsAttributes": [e[1] for e in events or []],
    }


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2025-06-20 21:37:08.604225", 1750455428.604225),  # no T, no Z: UTC
        ("2025-08-05T15:40:10.05080697Z", 1754408410.05080697),  # nanoseconds
        ("2025-08-05T15:40:10Z", 1754408410.0),
        ("2025-08-05T17:40:10+02:00", 1754408410.0),
    ],
)
def test_timestamps(text, expected):
    assert parse_timestamp(text) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("bad", ["yesterday", "2025-13-01T00:00:00Z", "", None, True])
def test_bad_timestamps_are_errors(bad):
    with pytest.raises(RowError, match="Timestamp"):
        parse_timestamp(bad)


def test_row_without_session_is_an_error():
    r = row("a", "x.tool")
    del r["SpanAttributes"]["session.id"]
    with pytest.raises(RowError, match="no session id"):
        parse_row(r)
    assert parse_row(r, session_hint="from-key").session_id == "from-key"
    r["SpanAttributes"]["execution.id"] = "exec-1"
    assert parse_row(r).session_id == "exec-1"


def test_llm_row_fields():
    span = parse_row(row(
        "l", "ChatOpenAI.chat", **{
            "gen_ai.request.model": "gpt-4o", "gen_ai.response.model": "gpt-4o-2024-08-06",
            "gen_ai.usage.prompt_tokens": "12", "gen_ai.usage.completion_tokens": "3", "llm.usage.total_tokens": "15",
            "gen_ai.usage.cache_read_input_tokens": "4", "gen_ai.request.temperature": "0.2",
            "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "hi",
            "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "hello",
            "gen_ai.completion.0.finish_reason": "stop", "gen_ai.system": "OpenAI",
        }
    ))
    assert span.kind == "llm"
    p = span.props
    assert (p["modelName"], p["promptTokenCount"], p["completionTokenCount"], p["totalTokenCount"], p["cacheReadTokenCount"]) == (
        "gpt-4o-2024-08-06", 12, 3, 15, 4
    )
    assert p["temperature"] == 0.2 and p["finishReason"] == "stop" and p["provider"] == "openai"
    assert json.loads(p["inputMessages"]) == [{"role": "user", "content": "hi"}]


def test_semantic_convention_names():
    span = parse_row(row("l", "call", **{"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": "7", "gen_ai.usage.output_tokens": "2", "gen_ai.request.model": "m"}))
    assert span.kind == "llm" and span.props["promptTokenCount"] == 7 and span.props["completionTokenCount"] == 2
    tool = parse_row(row("t", "run", **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "grep"}))
    assert tool.kind == "tool" and tool.props["toolName"] == "grep"
    oi = parse_row(row("o", "x", **{"openinference.span.kind": "LLM", "llm.token_count.prompt": "5"}))
    assert oi.kind == "llm" and oi.props["promptTokenCount"] == 5


def test_failure_signals():
    assert parse_row(row("a", "x.tool", status="Error")).success is False
    exc = parse_row(row("b", "x.tool", events=[("exception", {"exception.message": "boom"})]))
    assert exc.success is False and exc.error_message == "boom"
    assert parse_row(row("c", "x.tool", status="STATUS_CODE_ERROR")).success is False
    assert parse_row(row("d", "x.tool", **{"traceloop.entity.error": "bad args"})).error_message == "bad args"
    assert parse_row(row("e", "x.tool", status="Ok")).success is True
    assert parse_row(row("f", "x.tool")).success is None  # Unset: not known, not failed


def test_bad_token_count_is_an_error():
    with pytest.raises(RowError, match="gen_ai.usage.prompt_tokens"):
        parse_row(row("l", "a.chat", **{"gen_ai.usage.prompt_tokens": "many"}))


def links(graph):
    return {(l.source_id, l.rel, l.target_id) for l in graph.links}


def test_placement_rules():
    spans = [parse_row(r) for r in [
        row("wf", "LangGraph.workflow", start="2025-01-01T00:00:00Z", duration_ns=10_000_000_000),
        row("task", "step.task", parent="wf", start="2025-01-01T00:00:01Z"),
        row("http", "POST", parent="task", start="2025-01-01T00:00:01.1Z"),
        row("llm", "x.chat", parent="http", start="2025-01-01T00:00:01.2Z", duration_ns=100_000_000),
        row("inner", "RunnableSequence.workflow", parent="task", start="2025-01-01T00:00:01.5Z"),
        row("orphan", "t.tool", parent="not-here", start="2025-01-01T00:00:02Z", trace="t2"),
        row("agent", "a.agent", start="2025-01-01T00:00:03Z", duration_ns=2_000_000_000, trace="t3", agent_id="a"),
        row("ev", "agent_start_event", parent="agent", start="2025-01-01T00:00:03Z", duration_ns=1000, trace="t3"),
        row("work", "w.task", parent="wf", start="2025-01-01T00:00:03.5Z", duration_ns=100_000_000, agent_id="a"),
    ]]
    graph = build_session_graph("s1", spans)
    labels = {props["id"]: label for label, rows in graph.nodes.items() for props in rows}
    assert labels["wf"] is Label.MAS_CALL
    assert labels["inner"] is Label.TASK_CALL  # a nested workflow is a step, not the MAS
    assert labels["http"] is Label.SPAN and labels["ev"] is Label.SPAN
    got = links(graph)
    assert ("s1", Rel.HAS_MAS_CALL, "wf") in got
    assert ("task", Rel.HAS_LLM_CALL, "llm") in got  # through the non-call span, to the nearest call
    assert ("task", Rel.HAS_SPAN, "http") in got
    assert ("wf", Rel.HAS_TOOL_CALL, "orphan") in got  # parent elsewhere: hangs from the first MASCall
    assert ("wf", Rel.HAS_AGENT_CALL, "agent") in got  # a root agent too
    assert ("agent", Rel.HAS_SPAN, "ev") in got
    # `work` ran for agent `a` (agent_id) within its time: the agent reaches it too.
    assert ("wf", Rel.HAS_TASK_CALL, "work") in got and ("agent", Rel.HAS_TASK_CALL, "work") in got
    assert graph.counts["attributed_to_agent"] == 1


def test_session_without_mas_call_gets_one():
    spans = [parse_row(r) for r in [
        row("a1", "x.agent", start="2025-01-01T00:00:00Z"),
        row("l1", "y.chat", start="2025-01-01T00:00:05Z", trace="t2"),
    ]]
    graph = build_session_graph("s9", spans)
    mas = graph.nodes[Label.MAS_CALL]
    assert [m["id"] for m in mas] == [synthetic_mas_id("s9")]
    assert mas[0]["duration"] == pytest.approx(6000.0)  # 00:00:00 to 00:00:06
    assert (synthetic_mas_id("s9"), Rel.HAS_AGENT_CALL, "a1") in links(graph)


def test_problems_are_reported_not_dropped(tmp_path):
    rows = [
        row("ok", "LangGraph.workflow"),
        row("nosession", "x.tool"),
        row("badtime", "x.tool", start="not a time"),
        "not an object",
    ]
    del rows[1]["SpanAttributes"]["session.id"]
    path = tmp_path / "export.json"
    path.write_text(json.dumps(rows))
    report = IngestReport()
    graphs = build_graphs(collect_spans([path], report), report)
    assert report.rows == 4 and len(graphs) == 1
    reasons = {p.index: p.reason for p in report.problems}
    assert set(reasons) == {1, 2, 3}
    assert "no session id" in reasons[1] and "Timestamp" in reasons[2] and "object" in reasons[3]
    assert report.problems[0].span_id == "nosession"


def test_object_layout_and_bad_files(tmp_path):
    by_session = tmp_path / "by_session.json"
    r = row("x", "LangGraph.workflow")
    del r["SpanAttributes"]["session.id"]
    by_session.write_text(json.dumps({"from-key": [r]}))
    broken = tmp_path / "broken.json"
    broken.write_text('[{"SpanId": "a"},')
    report = IngestReport()
    spans = collect_spans([by_session, broken], report)
    assert list(spans) == ["from-key"]
    assert len(report.file_errors) == 1 and "broken.json" in report.file_errors[0]


def test_ingest_is_idempotent(kg, tmp_path):
    rows = [
        row("wf", "LangGraph.workflow", session="idem", duration_ns=5_000_000_000),
        row("l1", "x.chat", parent="wf", session="idem", **{"llm.usage.total_tokens": "9", "gen_ai.request.model": "gpt-4o", "traceloop.entity.input": "q"}),
        row("t1", "search.tool", parent="wf", session="idem", **{"traceloop.entity.output": "r"}),
    ]
    path = tmp_path / "idem.json"
    path.write_text(json.dumps(rows))

    def snapshot():
        nodes = kg.backend.query("MATCH (n) WHERE n.sessionId = 'idem' OR n:Agent OR n:Tool OR n:LLM OR n:State RETURN labels(n) AS l, properties(n) AS p")
        rels = kg.backend.query("MATCH (a)-[r]->(b) WHERE a.sessionId = 'idem' RETURN a.id AS a, type(r) AS t, coalesce(b.id, b.name) AS b")
        return sorted(json.dumps(n, sort_keys=True, default=str) for n in nodes), sorted(json.dumps(r, sort_keys=True) for r in rels)

    first = ingest_paths([path], kg)
    assert first.sessions == ["idem"]
    before = snapshot()
    ingest_paths([path], kg)
    assert snapshot() == before
    assert kg.read_contexts(["idem"])["idem"].calls(Label.LLM_CALL)[0].props["totalTokenCount"] == 9


def test_context_from_ingestion_equals_context_from_the_graph(kg, tmp_path):
    rows = [
        row("cw", "LangGraph.workflow", session="ctx", duration_ns=5_000_000_000),
        row("ca", "a.agent", session="ctx", trace="t2", start="2025-01-01T00:00:01Z", agent_id="a"),
        row("cl", "x.chat", parent="cw", session="ctx", start="2025-01-01T00:00:01.5Z", agent_id="a", **{"llm.usage.total_tokens": "9"}),
        row("cs", "POST", parent="cl", session="ctx", start="2025-01-01T00:00:01.6Z"),
    ]
    path = tmp_path / "ctx.json"
    path.write_text(json.dumps(rows))
    report = IngestReport()
    graph = build_graphs(collect_spans([path], report), report)[0]
    ingest_paths([path], kg)
    from_graph = kg.read_contexts(["ctx"])["ctx"]
    direct = graph.to_context()
    assert {k: sorted(v) for k, v in direct.children.items()} == {k: sorted(v) for k, v in from_graph.children.items()}
    assert direct.nodes.keys() == from_graph.nodes.keys()
    for node_id, node in from_graph.nodes.items():
        read = {k: v for k, v in node.props.items() if k != "ingestedAt"}
        assert read == {k: direct.nodes[node_id].props.get(k) for k in read}, node_id
    assert sorted(s.id for s in direct.spans) == sorted(s.id for s in from_graph.spans) == ["cs"]
