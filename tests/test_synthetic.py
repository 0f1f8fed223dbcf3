"""The synthetic session generator: reproducible, in the exporter's row layout,
realistic in shape, and written as a streamed JSON list."""

from __future__ import annotations

import builtins
import hashlib
import json
import random
import re
from collections import Counter, defaultdict
from datetime import datetime, timezone

import pytest
from typer.testing import CliRunner

from mce_dagster import synthetic
from mce_dagster.cli import app
from mce_dagster.ingest.mapping import build_session_graph
from mce_dagster.ingest.spans import parse_row
from mce_dagster.synthetic import SyntheticSummary, generate_rows, generate_session_rows, write_export

COLUMNS = {
    "Timestamp", "TraceId", "SpanId", "ParentSpanId", "TraceState", "SpanName", "SpanKind",
    "ServiceName", "ResourceAttributes", "ScopeName", "ScopeVersion", "SpanAttributes", "Duration",
    "StatusCode", "StatusMessage", "EventsTimestamp", "EventsName", "EventsAttributes",
    "LinksTraceId", "LinksSpanId", "LinksTraceState", "LinksAttributes",
}
TIMESTAMP = re.compile(r"^2025-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
HEX32 = re.compile(r"^[0-9a-f]{32}$")
HEX16 = re.compile(r"^[0-9a-f]{16}$")


def micros(timestamp: str) -> int:
    moment = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    delta = moment - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def by_session(rows: list[dict]) -> dict[str, list[dict]]:
    sessions: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        sessions[row["SpanAttributes"]["session.id"]].append(row)
    return sessions


def agent_sequence(rows: list[dict]) -> list[str]:
    agents = sorted((r for r in rows if r["SpanName"].endswith(".agent")), key=lambda r: r["Timestamp"])
    return [r["SpanAttributes"]["agent_id"] for r in agents]


def has_repeated_block(sequence: list[str]) -> bool:
    """A block of >= 2 names followed right away by the same block (A,B,A,B / A,B,C,A,B,C)."""
    n = len(sequence)
    return any(
        sequence[i : i + k] == sequence[i + k : i + 2 * k]
        for i in range(n)
        for k in range(2, (n - i) // 2 + 1)
    )


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return list(generate_rows(200, seed=0))


@pytest.fixture(scope="module")
def sessions(rows) -> dict[str, list[dict]]:
    return by_session(rows)


# -- reproducibility


def test_same_seed_gives_the_same_rows():
    assert list(generate_rows(15, seed=7)) == list(generate_rows(15, seed=7))
    assert generate_session_rows(random.Random(3)) == generate_session_rows(random.Random(3))


def test_different_seeds_give_different_sessions():
    first = by_session(list(generate_rows(10, seed=1)))
    second = by_session(list(generate_rows(10, seed=2)))
    assert len(first) == len(second) == 10
    assert not set(first) & set(second)
    assert [len(v) for v in first.values()] != [len(v) for v in second.values()]


def test_generate_rows_is_lazy():
    rows = generate_rows(1_000_000, seed=0)
    assert iter(rows) is rows
    assert next(rows)["SpanAttributes"]["session.id"]


# -- layout


def test_every_row_has_the_exporter_columns(rows):
    for row in rows:
        assert set(row) == COLUMNS, row["SpanName"]
        assert TIMESTAMP.match(row["Timestamp"])
        assert HEX32.match(row["TraceId"]) and HEX16.match(row["SpanId"])
        assert row["TraceState"] == ""
        assert row["SpanKind"] in ("Internal", "Client")
        assert row["StatusCode"] in ("Unset", "Ok", "Error")
        assert isinstance(row["Duration"], int) and row["Duration"] >= 0
        assert row["ResourceAttributes"] == {"service.name": row["ServiceName"]}
        assert isinstance(row["ScopeName"], str) and isinstance(row["ScopeVersion"], str)
        assert len(row["EventsTimestamp"]) == len(row["EventsName"]) == len(row["EventsAttributes"])
        assert all(TIMESTAMP.match(ts) for ts in row["EventsTimestamp"])
        for column in ("LinksTraceId", "LinksSpanId", "LinksTraceState", "LinksAttributes"):
            assert row[column] == []


def test_span_attributes_are_strings_and_carry_the_session(rows):
    for row in rows:
        attrs = row["SpanAttributes"]
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in attrs.items()), row["SpanName"]
        assert attrs["session.id"].startswith(row["ServiceName"] + "_")


def test_one_trace_per_session_with_one_workflow_root(sessions):
    assert len(sessions) == 200
    for session_rows in sessions.values():
        assert len({r["TraceId"] for r in session_rows}) == 1
        roots = [r for r in session_rows if r["ParentSpanId"] == ""]
        assert [r["SpanName"] for r in roots] == ["LangGraph.workflow"]
        assert roots[0]["SpanAttributes"]["traceloop.span.kind"] == "workflow"


def test_parents_exist_in_the_same_trace_and_contain_their_children(rows):
    spans = {(r["TraceId"], r["SpanId"]): r for r in rows}
    assert len(spans) == len(rows)
    for row in rows:
        if row["ParentSpanId"] == "":
            continue
        parent = spans.get((row["TraceId"], row["ParentSpanId"]))
        assert parent is not None, row["SpanName"]
        start, end = micros(row["Timestamp"]), micros(row["Timestamp"]) + row["Duration"] // 1000
        parent_start = micros(parent["Timestamp"])
        parent_end = parent_start + parent["Duration"] // 1000
        assert parent_start - 1 <= start and end <= parent_end + 1, (row["SpanName"], parent["SpanName"])
        for ts in row["EventsTimestamp"]:
            assert start - 1 <= micros(ts) <= end + 1


def test_siblings_run_one_after_another(sessions):
    for session_rows in list(sessions.values())[:50]:
        children = defaultdict(list)
        for row in session_rows:
            children[row["ParentSpanId"]].append(row)
        for parent_id, kids in children.items():
            if not parent_id:
                continue
            kids.sort(key=lambda r: r["Timestamp"])
            for before, after in zip(kids, kids[1:]):
                assert micros(before["Timestamp"]) + before["Duration"] // 1000 <= micros(after["Timestamp"])


# -- shape


def test_agent_activations(sessions):
    for session_rows in sessions.values():
        root = next(r for r in session_rows if r["ParentSpanId"] == "")
        agents = [r for r in session_rows if r["SpanName"].endswith(".agent")]
        assert 2 <= len(agents) <= 12
        assert 2 <= len({a["SpanAttributes"]["agent_id"] for a in agents}) <= 5
        for agent in agents:
            attrs = agent["SpanAttributes"]
            assert agent["ParentSpanId"] == root["SpanId"]
            assert agent["SpanName"] == f"{attrs['agent_id']}.agent"
            assert attrs["ioa_observe.span.kind"] == "agent"
            assert attrs["ioa_observe.entity.name"] == attrs["agent_id"]
            assert attrs["execution.success"] == "true"
            names = [r["SpanName"] for r in session_rows if r["ParentSpanId"] == agent["SpanId"]]
            assert names.count("agent_start_event") == names.count("agent_end_event") == 1


def test_some_session_has_a_hand_off_loop(sessions):
    loops = [sid for sid, session_rows in sessions.items() if has_repeated_block(agent_sequence(session_rows))]
    assert loops
    assert len(loops) < len(sessions)  # not every session loops


def test_llm_calls(rows):
    llms = [r for r in rows if r["SpanName"].endswith(".chat")]
    assert llms
    models = Counter(r["SpanAttributes"]["gen_ai.response.model"] for r in llms if r["StatusCode"] != "Error")
    assert len(models) >= 4
    assert "acme-llm-7b" in models  # a model no price table knows
    assert {r["SpanName"] for r in llms} >= {"ChatOpenAI.chat", "AzureChatOpenAI.chat"}
    wrapped = 0
    for row in llms:
        attrs = row["SpanAttributes"]
        assert row["SpanKind"] == "Client"
        assert attrs["llm.request.type"] == "chat" and attrs["gen_ai.system"] and attrs["gen_ai.request.model"]
        assert attrs["gen_ai.prompt.0.role"] == "user" and attrs["gen_ai.prompt.0.content"]
        if row["StatusCode"] == "Error":
            continue
        prompt = int(attrs["gen_ai.usage.prompt_tokens"])
        completion = int(attrs["gen_ai.usage.completion_tokens"])
        assert int(attrs["llm.usage.total_tokens"]) == prompt + completion
        assert 0 <= int(attrs["gen_ai.usage.cache_read_input_tokens"]) <= prompt
        assert attrs["gen_ai.completion.0.role"] == "assistant" and attrs["gen_ai.completion.0.finish_reason"]
        assert 0.3 <= row["Duration"] / 1e9 <= 4.0
        wrapped += row["ParentSpanId"] not in {r["SpanId"] for r in rows if r["SpanName"].endswith(".agent")}
    cached = [r for r in llms if r["SpanAttributes"].get("gen_ai.usage.cache_read_input_tokens", "0") != "0"]
    assert 0 < len(cached) < len(llms) / 2
    assert any("gen_ai.completion.0.tool_calls.0.name" in r["SpanAttributes"] for r in llms)
    assert any("llm.request.functions.0.name" in r["SpanAttributes"] for r in llms)
    assert wrapped  # some LLM calls sit inside a .task span


def test_wrapping_tasks(rows):
    tasks = [r for r in rows if r["SpanName"].endswith(".task")]
    assert tasks
    assert all(r["SpanAttributes"]["traceloop.span.kind"] == "task" for r in tasks)


def assert_exception_event(row):
    assert row["StatusCode"] == "Error" and row["StatusMessage"]
    assert row["EventsName"] == ["exception"]
    (event,) = row["EventsAttributes"]
    assert set(event) == {"exception.type", "exception.message", "exception.stacktrace"}
    assert event["exception.message"] in row["StatusMessage"]


def failures(rows, suffix: str) -> tuple[list[dict], float]:
    """The spans whose name ends with `suffix`, and the share of them that failed;
    each failure carries its exception event."""
    spans = [r for r in rows if r["SpanName"].endswith(suffix)]
    failed = [r for r in spans if r["StatusCode"] == "Error"]
    for row in failed:
        assert_exception_event(row)
    return spans, len(failed) / len(spans)


def test_some_tool_calls_fail_most_do_not(rows):
    tools, failed_share = failures(rows, ".tool")
    assert 0.03 < failed_share < 0.15
    for row in tools:
        attrs = row["SpanAttributes"]
        assert attrs["traceloop.span.kind"] == "tool"
        assert row["SpanName"] == f"{attrs['traceloop.entity.name']}.tool"
        json.loads(attrs["traceloop.entity.input"])
        if row["StatusCode"] != "Error":
            json.loads(attrs["traceloop.entity.output"])
            assert 0.05 <= row["Duration"] / 1e9 <= 3.0


def test_some_llm_calls_fail(rows):
    _, failed_share = failures(rows, ".chat")
    assert 0 < failed_share < 0.06


def test_http_spans_hang_under_tools(rows):
    spans = {r["SpanId"]: r for r in rows}
    posts = [r for r in rows if r["SpanName"] == "POST"]
    assert posts
    for row in posts:
        assert row["SpanKind"] == "Client"
        assert spans[row["ParentSpanId"]]["SpanName"].endswith(".tool")
        assert row["SpanAttributes"]["http.method"] == "POST"
        assert row["SpanAttributes"]["http.url"].startswith("https://")
    tools = [r for r in rows if r["SpanName"].endswith(".tool")]
    with_http = {r["ParentSpanId"] for r in posts}
    assert 0 < len(with_http) < len(tools)


def test_request_and_final_answer(sessions):
    for session_rows in sessions.values():
        root = next(r for r in session_rows if r["ParentSpanId"] == "")
        request, answer = json.loads(root["SpanAttributes"]["traceloop.entity.output"])["outputs"]["messages"]
        llms = sorted((r for r in session_rows if r["SpanName"].endswith(".chat")), key=lambda r: r["Timestamp"])
        assert llms[0]["SpanAttributes"]["gen_ai.prompt.0.content"] == request
        last_ok = [r for r in llms if r["StatusCode"] != "Error"][-1]
        assert last_ok["SpanAttributes"]["gen_ai.completion.0.content"] == answer
        assert last_ok["SpanAttributes"]["agent_id"] == agent_sequence(session_rows)[-1]


def test_rows_go_through_ingestion(sessions):
    for session_id, session_rows in list(sessions.items())[:40]:
        graph = build_session_graph(session_id, [parse_row(r) for r in session_rows])
        names = Counter(r["SpanName"].rsplit(".", 1)[-1] for r in session_rows)
        assert graph.counts["MASCall"] == 1
        assert graph.counts["AgentCall"] == names["agent"]
        assert graph.counts["LLMCall"] == names["chat"]
        assert graph.counts["ToolCall"] == names["tool"]
        assert graph.counts["placed_under_first_mas_call"] == 0


# -- export file


def test_write_export_matches_generate_rows(tmp_path):
    path = tmp_path / "out.json"
    summary = write_export(path, 12, seed=5)
    written = json.loads(path.read_text(encoding="utf-8"))
    assert written == list(generate_rows(12, seed=5))
    assert summary == SyntheticSummary(sessions=12, spans=len(written), path=path)
    with pytest.raises(AttributeError):
        summary.spans = 0  # frozen


def test_write_export_is_byte_identical_for_a_seed(tmp_path):
    write_export(tmp_path / "a.json", 8, seed=3)
    write_export(tmp_path / "b.json", 8, seed=3)
    write_export(tmp_path / "c.json", 8, seed=4)
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert (tmp_path / "a.json").read_bytes() != (tmp_path / "c.json").read_bytes()


def test_write_export_streams_row_by_row(tmp_path, monkeypatch):
    chunks: list[int] = []

    class Recording:
        def __init__(self, handle):
            self._handle = handle

        def write(self, text):
            chunks.append(len(text))
            return self._handle.write(text)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._handle.close()

    def recording_open(*args, **kwargs):
        return Recording(builtins.open(*args, **kwargs))

    monkeypatch.setattr(synthetic, "open", recording_open, raising=False)
    path = tmp_path / "streamed.json"
    summary = write_export(path, 20, seed=1)
    total = path.stat().st_size
    assert len(chunks) >= summary.spans  # at least one write per row
    assert max(chunks) < total / 20  # never the whole document at once
    assert path.read_text(encoding="utf-8")[0] == "["
    assert json.loads(path.read_text(encoding="utf-8"))


def test_write_export_of_no_session(tmp_path):
    summary = write_export(tmp_path / "empty.json", 0)
    assert json.loads((tmp_path / "empty.json").read_text()) == []
    assert summary.spans == 0


# What these seeds write, byte for byte: a change to the tables, or to the order
# in which the builder draws, changes them (and every export made so far).
KNOWN_EXPORTS = {
    (3, 8): "204c1bedb2d0817d3a0bf5bcf4da2701aa465765fee02fa8f7318acc3b41502c",
    (0, 50): "b77c97420de8fd31742400b5a014ed99fdc690aeb87e68616abfd86a04a8469d",
}


@pytest.mark.parametrize("seed, sessions", sorted(KNOWN_EXPORTS))
def test_a_seed_writes_what_it_always_wrote(tmp_path, seed, sessions):
    path = tmp_path / "export.json"
    write_export(path, sessions, seed=seed)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == KNOWN_EXPORTS[seed, sessions]


def test_mce_synth_writes_and_reports(tmp_path):
    path = tmp_path / "cli.json"
    result = CliRunner().invoke(app, ["synth", str(path), "--sessions", "3", "--seed", "9"])
    assert result.exit_code == 0, result.output
    rows = json.loads(path.read_text(encoding="utf-8"))
    assert rows == list(generate_rows(3, seed=9))
    assert f"wrote 3 sessions ({len(rows)} spans)" in result.output
    refused = CliRunner().invoke(app, ["synth", str(tmp_path / "no.json"), "--sessions", "-1"])
    assert refused.exit_code == 2 and not (tmp_path / "no.json").exists()
