"""The rules of ingestion for input that is broken or hostile (issue 8): each test
reproduces a case that lost data, hung or left orphans before, and checks the
graph afterwards with plain queries."""

from __future__ import annotations

import json
import signal
import time
from contextlib import contextmanager

import pytest
from typer.testing import CliRunner

from ingest_checks import orphans, session_ids, session_snapshot
from mce_dagster.core.ontology import Label, Rel
from mce_dagster.graph.store import KnowledgeGraph, _session_statement
from mce_dagster.ingest import IngestReport, build_graphs, collect_spans, ingest_paths
from mce_dagster.ingest.mapping import build_session_graph
from mce_dagster.ingest.spans import parse_row
from test_ingest import row

SUPERVISOR = "multi_agent_supervisor.json"


@contextmanager
def deadline(seconds: int):
    """Fail instead of hanging (the parent walk used to loop forever on a cycle)."""

    def expired(*_):
        raise TimeoutError(f"took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def write(tmp_path, name, rows) -> "object":
    path = tmp_path / name
    path.write_text(json.dumps(rows))
    return path


def reasons(report) -> dict[tuple[str, int], str]:
    return {(p.path.rsplit("/", 1)[-1], p.index): p.reason for p in report.problems}


def rows_of(path):
    data = json.loads(path.read_text())
    return data if isinstance(data, list) else [r for rows in data.values() for r in rows]


def links_to(kg, target_id):
    return {
        (r["a"], r["t"])
        for r in kg.backend.query("MATCH (a)-[r]->(b {id: $id}) RETURN a.id AS a, type(r) AS t", {"id": target_id})
    }


# -- 1. parent cycles ------------------------------------------------------------------


def test_a_parent_cycle_is_broken_and_reported(kg, tmp_path):
    rows = [
        row("cy-wf", "app.workflow", session="cycle", duration_ns=9_000_000_000),
        row("cy-agent", "a.agent", parent="cy-wf", session="cycle", agent_id="a", duration_ns=5_000_000_000),
        row("cy-A", "x.chat", parent="cy-B", session="cycle", start="2025-01-01T00:00:01Z"),
        row("cy-B", "y.tool", parent="cy-A", session="cycle", start="2025-01-01T00:00:02Z"),
        # Through plain spans: P and Q are HTTP spans whose parents loop; the LLM call below P walks up through them.
        row("cy-P", "POST", parent="cy-Q", session="cycle", start="2025-01-01T00:00:03Z"),
        row("cy-Q", "GET", parent="cy-P", session="cycle", start="2025-01-01T00:00:03Z"),
        row("cy-L", "z.chat", parent="cy-P", session="cycle", start="2025-01-01T00:00:03.5Z", agent_id="a"),
        row("cy-self", "me.task", parent="cy-self", session="cycle", start="2025-01-01T00:00:04Z"),
    ]
    with deadline(20):
        report = ingest_paths([write(tmp_path, "cycle.json", rows)], kg)
    assert report.sessions == ["cycle"] and report.problem_count == 0
    noted = {n.span_id: n.reason for n in report.notices}
    assert set(noted) == {"cy-A", "cy-B", "cy-P", "cy-Q", "cy-self"}
    assert "loop (cy-A -> cy-B -> cy-A)" in noted["cy-A"] and "first MASCall" in noted["cy-B"]
    assert "cy-self -> cy-self" in noted["cy-self"]
    assert links_to(kg, "cy-A") == {("cy-wf", Rel.HAS_LLM_CALL.value)}
    assert links_to(kg, "cy-B") == {("cy-wf", Rel.HAS_TOOL_CALL.value)}
    assert links_to(kg, "cy-P") == {("cy-wf", Rel.HAS_SPAN.value)}
    # Below the broken loop the walk goes on as usual: no call above P, so the
    # first MASCall, and the agent named by agent_id reaches it too.
    assert links_to(kg, "cy-L") == {("cy-wf", Rel.HAS_LLM_CALL.value), ("cy-agent", Rel.HAS_LLM_CALL.value)}
    assert not orphans(kg)


def test_long_loops_and_chains_map_in_linear_time():
    n = 20_000
    loop = [parse_row(row(f"l{i}", "POST", parent=f"l{(i + 1) % n}", session="big")) for i in range(n)]
    chain = [parse_row(row(f"c{i}", "GET", parent=f"c{i - 1}" if i else "", session="big2")) for i in range(n)]
    chain.append(parse_row(row("leaf", "x.chat", parent=f"c{n - 1}", session="big2")))
    started = time.perf_counter()
    with deadline(30):
        looped = build_session_graph("big", loop)
        chained = build_session_graph("big2", chain)
    assert time.perf_counter() - started < 10
    assert looped.counts["parent_cycles"] == 1 and len(looped.notes) == n
    # 20,000 non-call spans between the leaf and the root: its call parent is the MASCall made for the session.
    assert any(l.target_id == "leaf" and l.source_id == "big2#mas" for l in chained.links)


# -- 2. span ids held by another session ------------------------------------------------------


def test_a_copy_with_a_new_session_id_takes_nothing_over(kg, real_traces, tmp_path):
    original = rows_of(real_traces / SUPERVISOR)
    sid = original[0]["SpanAttributes"]["execution.id"]
    copy = json.loads(json.dumps(original))
    for r in copy:
        r["SpanAttributes"]["execution.id"] = "copy-of-" + sid
    first = ingest_paths([real_traces / SUPERVISOR], kg)
    assert first.sessions == [sid]
    before = session_snapshot(kg, sid)
    llm_calls = len(kg.read_contexts([sid])[sid].calls(Label.LLM_CALL))
    assert llm_calls == 4

    report = ingest_paths([write(tmp_path, "copy.json", copy)], kg)
    assert report.sessions == [] and report.ingested == 0
    assert report.problem_count == len(copy)
    assert all(f"already belongs to session {sid!r}" in p.reason for p in report.problems)
    assert session_snapshot(kg, sid) == before
    assert "copy-of-" + sid not in session_ids(kg)
    assert not orphans(kg)

    # The same in one call: the first row to claim a span id owns it.
    both = ingest_paths([write(tmp_path, "copy2.json", [{**r, "SpanAttributes": {**r["SpanAttributes"], "execution.id": "b"}} for r in original[:3]]), write(tmp_path, "copy3.json", [{**r, "SpanAttributes": {**r["SpanAttributes"], "execution.id": "c"}} for r in original[:3]])], kg)
    assert both.sessions == [] and len(both.problems) == 6
    copy3 = [p.reason for p in both.problems if p.path.endswith("copy3.json")]
    assert len(copy3) == 3 and all("already belongs to session 'b' (row" in r for r in copy3)
    assert session_snapshot(kg, sid) == before


def test_reingesting_the_same_rows_is_idempotent_and_exits_0(kg, real_traces):
    path = real_traces / "gls_linear.json"
    first = ingest_paths([path], kg)
    [sid] = first.sessions
    before = session_snapshot(kg, sid)
    again = ingest_paths([path], kg)
    assert again.sessions == [] and again.unchanged == [sid] and again.problem_count == 0
    assert again.placed == again.rows == first.rows
    assert session_snapshot(kg, sid) == before


# -- 3. rows of a session already stored: merged, never changed -------------------------------------------------------


def test_rows_of_a_stored_session_are_merged_a_changed_row_is_refused_and_replace_rebuilds_it(kg, tmp_path):
    part1 = [
        row("sp-wf", "app.workflow", session="split", duration_ns=2_000_000_000),
        row("sp-l1", "x.chat", parent="sp-wf", session="split", **{"llm.usage.total_tokens": "5"}),
    ]
    part2 = [
        row("sp-l2", "x.chat", parent="sp-wf", session="split", start="2025-01-01T00:00:30Z", **{"llm.usage.total_tokens": "7"}),
        {**part1[1], "SpanName": "renamed.chat"},  # another version of a stored span
    ]
    a, b = write(tmp_path, "part1.json", part1), write(tmp_path, "part2.json", part2)
    assert ingest_paths([a], kg).sessions == ["split"]
    from mce_dagster.core.models import MetricNode, MetricResultNode, result_id
    from mce_dagster.core.ontology import Scope

    metric = MetricNode(name="Probe", provider="native", scope=["Session"], unit="x", valueRange="[0, null]", description="d", version=1)
    kg.write_results(metric, Scope.SESSION, [MetricResultNode(
        id=result_id("Probe", "native", "split", 1), name="Probe", provider="native", scope=Scope.SESSION,
        entityId="split", sessionId="split", result=1.0, metricVersion=1, computedAt=time.time())])
    ingested_at = kg.stored_sessions(["split"])["split"]["ingestedAt"]

    # Part 2 grows the session by sp-l2; its other version of sp-l1 is a conflict:
    # reported, not placed, and the stored sp-l1 stays as it was.
    later = ingest_paths([b], kg)
    assert later.sessions == later.merged == ["split"] and later.spans == 1 and later.placed == 1
    assert later.problem_count == 1
    got = reasons(later)
    assert "already holds span 'sp-l1' from another version of this row" in got[("part2.json", 1)]
    assert "the stored span is kept" in got[("part2.json", 1)] and "--replace" in got[("part2.json", 1)]
    context = kg.read_contexts(["split"])["split"]
    assert sorted(c.id for c in context.calls(Label.LLM_CALL)) == ["sp-l1", "sp-l2"]
    assert context.nodes["sp-l1"].props["name"] == "x.chat"
    assert context.session.props["duration"] == 31_000.0
    assert context.session.props["rowsNotPlaced"] == 1
    assert kg.stored_sessions(["split"])["split"]["ingestedAt"] == ingested_at  # when it first arrived
    assert len(kg.read_results(["split"])) == 1  # kept until the session is evaluated again
    grown = session_snapshot(kg, "split")

    # Either part again changes nothing: the same rows are idempotent, the refused
    # row is reported again and still counted once.
    again = ingest_paths([a], kg)
    assert again.unchanged == ["split"] and again.problem_count == 0 and again.sessions == []
    assert session_snapshot(kg, "split") == grown
    again = ingest_paths([b], kg)
    assert again.unchanged == ["split"] and again.problem_count == 1 and again.sessions == []
    assert session_snapshot(kg, "split") == grown

    # --replace rebuilds it from the rows given (the later copy of sp-l1 wins) and drops its old results.
    rebuilt = ingest_paths([a, b], kg, replace=True)
    assert rebuilt.replaced == ["split"] and rebuilt.sessions == ["split"]
    assert rebuilt.problem_count == 1  # part1's sp-l1, superseded by part2's
    context = kg.read_contexts(["split"])["split"]
    assert sorted(c.id for c in context.calls(Label.LLM_CALL)) == ["sp-l1", "sp-l2"]
    assert context.nodes["sp-l1"].props["name"] == "renamed.chat"
    assert context.session.props["duration"] == 31_000.0
    assert kg.read_results(["split"]) == []
    assert not orphans(kg)


def test_a_call_whose_only_row_of_a_stored_session_is_refused_records_it_once_then_leaves_it_unchanged(kg, tmp_path):
    stored = write(tmp_path, "stored.json", [row("sp-only", "app.workflow", session="lone")])
    other = write(tmp_path, "other.json", [{**row("sp-only", "app.workflow", session="lone"), "StatusCode": "Ok"}])
    assert ingest_paths([stored], kg).sessions == ["lone"]

    # The refusal is written into the session (its count of rows not placed) ...
    first = ingest_paths([other], kg)
    assert first.sessions == ["lone"] and first.spans == 0 and first.problem_count == 1
    assert kg.read_contexts(["lone"])["lone"].session.props["rowsNotPlaced"] == 1
    recorded = session_snapshot(kg, "lone")

    # ... and the same call again is reported again, and changes nothing.
    again = ingest_paths([other], kg)
    assert again.sessions == [] and again.unchanged == ["lone"] and again.problem_count == 1
    assert session_snapshot(kg, "lone") == recorded


# -- 4. characters the graph cannot carry ------------------------------------------------------


def test_nul_and_unpaired_surrogates_are_kept_escaped_per_row(kg, real_traces, tmp_path):
    hostile = [
        row("nul-wf", "app.workflow", session="nul", **{"traceloop.entity.output": "a\u0000b"}),
        row("nul-t", "t.tool", parent="nul-wf", session="nul", **{"traceloop.entity.input": "lone \udc00 half", "tool.na\u0000me": "x"}),
        row("bad\u0000id", "t.tool", parent="nul-wf", session="nul"),
    ]
    path = tmp_path / "nul.json"
    path.write_text(json.dumps(hostile))  # ensure_ascii: the escapes \u0000 and \udc00, valid JSON
    raw = tmp_path / "raw.json"  # the same surrogate as (invalid) UTF-8 bytes, and a stray byte
    raw.write_bytes(json.dumps([row("raw-wf", "app.workflow", session="raw", **{"traceloop.entity.output": "x\udc00y"})], ensure_ascii=False).encode("utf-8", "surrogatepass").replace(b"x", b"\xff", 1))
    report = ingest_paths([path, raw, real_traces / "llm_single_session.json"], kg)
    assert sorted(report.sessions) == ["nul", "outshift_langgraph_app_0ef9ae3d-bbe0-4e6a-861a-6d9d22dd0f09", "raw"]
    assert report.file_errors == []
    [problem] = report.problems
    assert problem.index == 2 and "SpanId 'bad\\x00id' holds a NUL" in problem.reason
    # NULs are counted per row; the reader keeps unpaired surrogates and stray bytes as text, per file.
    assert {(n.span_id, n.reason.split(" ")[0]) for n in report.notices} == {("nul-wf", "1"), ("nul-t", "1")}
    assert len(report.file_notices) == 2
    assert "nul.json: 1 unpaired surrogate escape(s)" in report.file_notices[0]
    assert "raw.json: 4 byte(s) that are not UTF-8" in report.file_notices[1]
    states = {r["id"]: r["c"] for r in kg.backend.query("MATCH (s:State) WHERE s.sessionId IN ['nul', 'raw'] RETURN s.id AS id, s.content AS c")}
    # Kept as text: the escape the JSON had, and the bytes that were not UTF-8.
    assert states == {"nul-wf/output": "a\\u0000b", "nul-t/input": "lone \\udc00 half", "raw-wf/output": "\\xff\\xed\\xb0\\x80y"}
    assert not orphans(kg)


def test_a_row_the_client_cannot_send_fails_alone(kg, tmp_path):
    # Values the FalkorDB client would turn into a query it cannot parse, or clamp
    # silently: an infinite temperature, a token count beyond 64 bits.
    rows = [
        row("big-wf", "app.workflow", session="big-values"),
        row("big-inf", "x.chat", parent="big-wf", session="big-values", **{"gen_ai.request.temperature": "inf"}),
        row("big-tok", "x.chat", parent="big-wf", session="big-values", **{"gen_ai.usage.prompt_tokens": str(2**64)}),
        row("big-far", "x.chat", parent="big-wf", session="big-values", start="2300-01-01T00:00:00Z"),
    ]
    report = ingest_paths([write(tmp_path, "big.json", rows)], kg)
    assert report.sessions == ["big-values"] and report.spans == 1
    got = reasons(report)
    assert "temperature is not a number" in got[("big.json", 1)]
    assert "not a token count" in got[("big.json", 2)]
    assert "out of range" in got[("big.json", 3)]


# -- 5. files that break off -------------------------------------------------------------------


def test_a_truncated_file_writes_nothing_and_the_other_files_are_untouched(kg, real_traces, tmp_path):
    truncated = tmp_path / "truncated.json"
    whole = (real_traces / "api_noa_2.json").read_bytes()
    truncated.write_bytes(whole[: len(whole) // 2])
    good = real_traces / "llm_single_session.json"
    # A session with rows in a whole file and in the truncated one is not stored from either.
    noa = rows_of(real_traces / "api_noa_2.json")
    noa_sid = noa[0]["SpanAttributes"]["session.id"]
    elsewhere = write(tmp_path, "elsewhere.json", noa[-2:])
    before = session_ids(kg)
    report = ingest_paths([truncated, good, elsewhere], kg)
    [error] = report.file_errors
    assert "truncated.json: invalid JSON after" in error and "premature EOF" in error
    assert "nothing of this file is ingested" in error and noa_sid in error
    assert noa_sid not in session_ids(kg) and noa_sid not in report.sessions
    assert report.problem_count == 2 and all("which breaks off" in p.reason for p in report.problems)
    assert session_ids(kg) - before <= {"outshift_langgraph_app_0ef9ae3d-bbe0-4e6a-861a-6d9d22dd0f09"}
    assert report.rows == report.placed + report.problem_count + report.broken_rows
    assert not kg.backend.query("MATCH (n) WHERE n.sessionId = $s RETURN n.id AS id", {"s": noa_sid})
    assert not orphans(kg)


def test_deep_nesting_is_a_file_error_not_a_memory_blowup(kg, tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" + "[" * 200_000)  # ijson needs memory growing with depth squared
    with deadline(20):
        report = ingest_paths([deep], kg)
    assert report.ingested == 0 and "nested deeper than" in report.file_errors[0]


# -- 6. smaller ones ---------------------------------------------------------------------------


def test_a_row_without_trace_id_is_reported(kg, tmp_path):
    rows = [row("nt-wf", "app.workflow", session="no-trace"), row("nt-x", "x.tool", parent="nt-wf", session="no-trace")]
    del rows[1]["TraceId"]
    report = ingest_paths([write(tmp_path, "notrace.json", rows)], kg)
    assert report.sessions == ["no-trace"] and reasons(report) == {("notrace.json", 1): "no TraceId"}


def without_ingested_at(snapshot):
    nodes, links = snapshot
    return [json.dumps({k: v for k, v in json.loads(n)["p"].items() if k != "ingestedAt"}, sort_keys=True) for n in nodes], links


def test_a_child_before_its_parent_is_placed_once_the_parent_arrives(kg, tmp_path):
    from mce_dagster.core.models import MetricNode, MetricResultNode, result_id
    from mce_dagster.core.ontology import Scope

    wf = row("pc-wf", "app.workflow", session="pc", duration_ns=5_000_000_000)
    agent = row("pc-a", "a.agent", parent="pc-wf", session="pc", start="2025-01-01T00:00:01Z", agent_id="a")
    llm = row("pc-l", "x.chat", parent="pc-a", session="pc", start="2025-01-01T00:00:02Z", **{"llm.usage.total_tokens": "3"})
    bad = row("pc-bad", "x.tool", parent="pc-a", session="pc", start="soon")
    whole = write(tmp_path, "pc-whole.json", [wf, agent, llm, bad])
    assert ingest_paths([whole], kg).sessions == ["pc"]
    one_call = session_snapshot(kg, "pc")
    kg.delete_sessions(["pc"])

    # The LLM call first (and the bad row): it hangs from a MASCall made for the session.
    first = ingest_paths([write(tmp_path, "pc-1.json", [llm, bad])], kg)
    assert first.sessions == ["pc"] and first.problem_count == 1
    context = kg.read_contexts(["pc"])["pc"]
    assert [c.id for c in context.calls(Label.MAS_CALL)] == ["pc#mas"]
    assert context.session.props["rowsNotPlaced"] == 1
    metric = MetricNode(name="Probe", provider="native", scope=["MASCall", "LLMCall"], unit="x", valueRange="[0, null]", description="d", version=1)
    for scope, entity in ((Scope.MAS_CALL, "pc#mas"), (Scope.LLM_CALL, "pc-l")):
        kg.write_results(metric, scope, [MetricResultNode(
            id=result_id("Probe", "native", entity, 1), name="Probe", provider="native", scope=scope,
            entityId=entity, sessionId="pc", result=1.0, metricVersion=1, computedAt=time.time())])

    # Its agent, with the bad row again: the bad row is still one row not placed.
    second = ingest_paths([write(tmp_path, "pc-2.json", [agent, bad])], kg)
    assert second.merged == ["pc"] and second.problem_count == 1
    assert kg.read_contexts(["pc"])["pc"].session.props["rowsNotPlaced"] == 1
    assert ("pc-a", str(Rel.HAS_LLM_CALL)) in links_to(kg, "pc-l")

    # A later call whose file breaks off adds nothing; nor does a row whose span id
    # another session holds.
    ingest_paths([write(tmp_path, "other.json", [row("ot-wf", "app.workflow", session="other")])], kg)
    before = session_snapshot(kg, "pc")
    broken = tmp_path / "pc-broken.json"
    broken.write_text(json.dumps([wf, bad])[:-20])
    report = ingest_paths([broken], kg)
    assert report.sessions == [] and report.file_errors and "after 1 row(s)" in report.file_errors[0]
    assert session_snapshot(kg, "pc") == before
    taken = write(tmp_path, "pc-taken.json", [row("ot-wf", "y.tool", parent="pc-a", session="pc")])
    report = ingest_paths([taken], kg)
    assert report.merged == [] and report.spans == 0
    assert "already belongs to session 'other'" in reasons(report)[("pc-taken.json", 0)]
    assert session_snapshot(kg, "pc")[1] == before[1]  # links: nothing merged
    assert kg.read_contexts(["pc"])["pc"].session.props["rowsNotPlaced"] == 2  # the taken row is counted

    # The workflow: the tree is whole; the result of the MASCall made for the session is gone with it, the
    # LLM call's still measures it.
    third = ingest_paths([write(tmp_path, "pc-3.json", [wf])], kg)
    assert third.merged == ["pc"] and third.problem_count == 0
    context = kg.read_contexts(["pc"])["pc"]
    assert [c.id for c in context.calls(Label.MAS_CALL)] == ["pc-wf"]
    assert ("pc-wf", str(Rel.HAS_AGENT_CALL)) in links_to(kg, "pc-a")
    results = {r["entityId"] for r in kg.read_results(["pc"])}
    assert results == {"pc-l"}
    measured = kg.backend.query("MATCH (x:MetricResult)-[:measures]->(e) WHERE x.sessionId = 'pc' RETURN e.id AS e")
    assert [r["e"] for r in measured] == ["pc-l"]
    again = ingest_paths([taken], kg)  # still refused, still counted once
    assert again.sessions == [] and again.problem_count == 1
    assert kg.read_contexts(["pc"])["pc"].session.props["rowsNotPlaced"] == 2
    kg.delete_sessions(["pc"])
    # Without the taken row, the pieces give what the single call gave.
    for piece in ("pc-1.json", "pc-3.json", "pc-2.json"):
        ingest_paths([tmp_path / piece], kg)
    assert without_ingested_at(session_snapshot(kg, "pc")) == without_ingested_at(one_call)
    assert not orphans(kg)


def test_a_session_stored_without_span_records_is_not_merged_into(kg, tmp_path):
    """Sessions an older ingest wrote keep no record of their spans: rows arriving
    later are refused with what to do, never mapped against a partial view."""
    first = [row("old-wf", "app.workflow", session="old")]
    assert ingest_paths([write(tmp_path, "old1.json", first)], kg).sessions == ["old"]
    kg.backend.write([("MATCH (n:MASCall {sessionId: $s}) REMOVE n.ingestSpan", {"s": "old"})])
    before = session_snapshot(kg, "old")
    later = ingest_paths([write(tmp_path, "old2.json", [row("old-t", "t.tool", parent="old-wf", session="old")])], kg)
    assert later.sessions == [] and later.problem_count == 1
    assert "stored by an older mce ingest" in later.problems[0].reason and "--replace" in later.problems[0].reason
    assert session_snapshot(kg, "old") == before
    assert ingest_paths([write(tmp_path, "old1.json", first)], kg).unchanged == ["old"]


def test_the_cli_exits_1_with_the_reason_when_nothing_is_ingested(mce_home, kg, tmp_path):
    from mce_dagster.cli import app

    runner = CliRunner()
    bad = write(tmp_path, "bad.json", [row("x1", "x.tool", start="soon", session="cli-none")])
    result = runner.invoke(app, ["ingest", str(bad)], env={"MCE_HOME": str(mce_home)})
    assert result.exit_code == 1
    assert "ingested 0 sessions" in result.output and "nothing ingested: 1 row(s): bad Timestamp" in result.output
    empty = write(tmp_path, "empty.json", [])
    result = runner.invoke(app, ["ingest", str(empty)], env={"MCE_HOME": str(mce_home)})
    assert result.exit_code == 1 and "the files hold no span rows" in result.output
    ok = write(tmp_path, "ok.json", [row("cli-ok-wf", "app.workflow", session="cli-ok")])
    assert runner.invoke(app, ["ingest", str(ok)], env={"MCE_HOME": str(mce_home)}).exit_code == 0
    again = runner.invoke(app, ["ingest", str(ok)], env={"MCE_HOME": str(mce_home)})
    assert again.exit_code == 0 and "1 already stored unchanged" in again.output
    more = write(tmp_path, "more.json", [row("cli-ok-t", "t.tool", parent="cli-ok-wf", session="cli-ok")])
    grown = runner.invoke(app, ["ingest", str(more)], env={"MCE_HOME": str(mce_home)})
    assert grown.exit_code == 0 and "ingested 1 sessions (1 spans)" in grown.output
    assert "1 stored session(s) grown by new rows" in grown.output


def test_duplicate_rows_with_other_content_are_reported(kg, tmp_path):
    rows = [row("dup-wf", "app.workflow", session="dup"), row("dup-x", "x.tool", parent="dup-wf", session="dup")]
    rows += [dict(rows[1]), {**rows[1], "SpanName": "y.tool"}]  # an identical copy, then another version
    report = ingest_paths([write(tmp_path, "dup.json", rows)], kg)
    assert report.sessions == ["dup"] and report.placed == 2 and report.problem_count == 2
    assert all("appears again later in the session (row 3 of" in r for r in reasons(report).values())
    assert kg.read_contexts(["dup"])["dup"].nodes["dup-x"].props["toolName"] == "y"


# -- 7. failures while writing: no orphans, no lost sessions ------------------------------------


class FlakyBackend:
    """The real backend, whose write raises on the given calls: before running the
    statement, or (`after=True`) once it has run."""

    def __init__(self, backend, fail_on: set[int], after: bool = False):
        self.inner, self.fail_on, self.after, self.calls = backend, fail_on, after, 0
        self.name, self.enforces_unique_ids = backend.name, backend.enforces_unique_ids

    def query(self, statement, params=None):
        return self.inner.query(statement, params)

    def write(self, statements):
        self.calls += 1
        if self.calls in self.fail_on and not self.after:
            raise ConnectionError(f"injected failure on write {self.calls}")
        out = self.inner.write(statements)
        if self.calls in self.fail_on:
            raise ConnectionError(f"injected failure after write {self.calls}")
        return out

    def ensure_indexes(self, statements):
        self.inner.ensure_indexes(statements)

    def close(self):
        pass


def three_sessions(tmp_path, prefix):
    rows = []
    for i in range(3):
        s = f"{prefix}{i}"
        rows += [
            row(f"{s}-wf", "app.workflow", session=s, duration_ns=3_000_000_000),
            row(f"{s}-l", "x.chat", parent=f"{s}-wf", session=s, **{"traceloop.entity.input": "q", "gen_ai.request.model": "m"}),
            row(f"{s}-t", "t.tool", parent=f"{s}-wf", session=s, **{"traceloop.entity.output": "r"}),
        ]
    return write(tmp_path, f"{prefix}.json", rows)


def test_a_failed_write_leaves_no_orphans_and_loses_no_other_session(kg, tmp_path):
    keep = ingest_paths([write(tmp_path, "keep.json", [row("keep-wf", "app.workflow", session="keep")])], kg)
    kept = session_snapshot(kg, "keep")
    flaky = KnowledgeGraph(FlakyBackend(kg.backend, fail_on={1, 3}))  # the batch, then session f1 alone
    report = ingest_paths([three_sessions(tmp_path, "f")], flaky, batch_size=10)
    assert report.sessions == ["f0", "f2"] and keep.sessions == ["keep"]
    assert {p.span_id for p in report.problems} == {"f1-wf", "f1-l", "f1-t"}
    assert all("could not be written" in p.reason and "injected failure on write 3" in p.reason for p in report.problems)
    assert not kg.backend.query("MATCH (n) WHERE n.sessionId = 'f1' RETURN n.id AS id")
    assert session_snapshot(kg, "keep") == kept
    assert not orphans(kg)
    # The next ingest of the same file writes the session that failed, and only that.
    f0 = session_snapshot(kg, "f0")
    again = ingest_paths([tmp_path / "f.json"], kg)
    assert again.sessions == ["f1"] and sorted(again.unchanged) == ["f0", "f2"]
    assert session_snapshot(kg, "f0") == f0


def test_a_write_reported_failed_after_it_ran_is_rewritten_the_same(kg, tmp_path):
    flaky = KnowledgeGraph(FlakyBackend(kg.backend, fail_on={1}, after=True))
    report = ingest_paths([three_sessions(tmp_path, "g")], flaky, batch_size=10)
    assert report.sessions == ["g0", "g1", "g2"] and report.problem_count == 0
    counts = kg.backend.query("MATCH (n) WHERE n.sessionId IN ['g0', 'g1', 'g2'] RETURN n.id AS id, count(*) AS c")
    assert len(counts) == 3 + 3 * 3 + 6 and all(r["c"] == 1 for r in counts)  # sessions, calls, states: no copies
    assert not orphans(kg)


def test_a_statement_that_fails_inside_the_server_leaves_nothing(kg, tmp_path):
    """FalkorDB rolls a failing statement back: what write_sessions relies on."""
    report = IngestReport()
    graphs = build_graphs(collect_spans([three_sessions(tmp_path, "h")], report), report)
    graphs[-1].nodes[Label.TOOL_CALL][0]["toolArguments"] = {"not": "a primitive"}  # the server refuses a map value
    with pytest.raises(Exception, match="primitive"):
        kg.backend.write([_session_statement(graphs)])
    assert not kg.backend.query("MATCH (n) WHERE n.sessionId IN ['h0', 'h1', 'h2'] OR n.id IN ['h0', 'h1', 'h2'] RETURN n.id AS id")
    failed = kg.write_sessions(graphs)
    assert list(failed) == ["h2"] and "primitive" in failed["h2"]
    assert session_ids(kg) >= {"h0", "h1"} and "h2" not in session_ids(kg)
    assert not orphans(kg)


@pytest.mark.parametrize("name", ["multi_agent_supervisor.json", "api_noa_2.json", "gls_linear.json", "llm_single_session.json"])
def test_head_c_5000_of_a_real_trace_stores_nothing(kg, real_traces, tmp_path, name):
    cut = tmp_path / name
    cut.write_bytes((real_traces / name).read_bytes()[:5000])
    sid = rows_of(real_traces / name)[0]["SpanAttributes"]
    sid = sid.get("session.id") or sid["execution.id"]
    before = session_ids(kg)
    report = ingest_paths([cut], kg)
    assert report.ingested == 0 and len(report.file_errors) == 1 and "premature EOF" in report.file_errors[0]
    assert session_ids(kg) == before
    if sid not in before:
        assert not kg.backend.query("MATCH (n) WHERE n.sessionId = $s RETURN n.id AS id", {"s": sid})
    assert not orphans(kg)
