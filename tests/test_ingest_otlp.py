"""OTLP JSON, as users' SDKs and the OpenTelemetry Collector export traces: the four
real traces (ClickHouse exporter layout) are converted to OTLP here, by code that
does not share the engine's, and must give the same graph as the originals; broken
OTLP input is reported span by span."""

from __future__ import annotations

import base64
import calendar
import io
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ingest_checks import orphans, session_ids, session_snapshot
from mce_dagster.ingest import IngestReport, build_graphs, collect_spans, ingest_paths
from mce_dagster.ingest.otlp import OtlpError, attributes, iter_spans
from mce_dagster.ingest.reader import OTLP, ROWS, SESSIONS, ExportFormatError, detect_layout, iter_rows

FILES = ["multi_agent_supervisor.json", "api_noa_2.json", "gls_linear.json", "llm_single_session.json"]
# Bookkeeping that differs between two ingests of the same spans: when, and the
# digest of the source row (whose layout differs here).
BOOKKEEPING = {"ingestedAt", "ingestDigest"}
EXPORTER_COLUMNS = (
    "TraceId", "ParentSpanId", "TraceState", "SpanName", "SpanKind", "ServiceName", "ResourceAttributes", "ScopeName",
    "ScopeVersion", "SpanAttributes", "Duration", "StatusCode", "StatusMessage", "EventsName", "EventsAttributes",
    "LinksTraceId", "LinksSpanId", "LinksTraceState", "LinksAttributes",
)


# -- ClickHouse rows -> OTLP, independently of the engine ---------------------------------

_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z?")
_PY_DATETIME = re.compile(r"datetime\.datetime\(([\d, ]+)\)")
KINDS = {"Unspecified": 0, "Internal": 1, "Server": 2, "Client": 3, "Producer": 4, "Consumer": 5}
STATUS = {"Unset": 0, "Ok": 1, "Error": 2}


def nanos(text: str) -> int:
    y, mo, d, h, mi, s, frac = _ISO.fullmatch(text).groups()
    whole = calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), int(s), 0, 0, 0))
    return whole * 10**9 + int((frac or "").ljust(9, "0"))


def event_times(value) -> list[int]:
    """The exporter's event times: ISO strings, or (in one real file) the text of a
    Python list of datetimes."""
    if isinstance(value, list):
        return [nanos(v) for v in value]
    times = []
    for fields in _PY_DATETIME.findall(value):
        parts = [int(p) for p in fields.split(",")] + [0] * 7
        y, mo, d, h, mi, s, micro = parts[:7]
        times.append(calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) * 10**9 + micro * 1000)
    return times


def column(row, name):
    return row.get(name, row.get(name.replace("Events", "Events.").replace("Links", "Links."), []))


def typed(value: str) -> dict:
    """The typed OTLP value that the exporter would write back as this same text."""
    if value in ("true", "false"):
        return {"boolValue": value == "true"}
    if re.fullmatch(r"-?(?:[1-9]\d{0,17}|0)", value):
        return {"intValue": value if len(value) % 2 else int(value)}  # both spellings of int64
    if re.fullmatch(r"-?\d+\.\d*[1-9]", value) and repr(float(value)) == value:
        return {"doubleValue": float(value)}
    return {"stringValue": value}


def otlp_attributes(attrs: dict, with_types: bool) -> list[dict]:
    return [{"key": k, "value": typed(v) if with_types else {"stringValue": v}} for k, v in attrs.items()]


def hex_or_base64(hex_id: str, as_base64: bool) -> str:
    return base64.b64encode(bytes.fromhex(hex_id)).decode() if as_base64 and hex_id else hex_id


def otlp_span(row: dict, variant: int) -> dict:
    """One ClickHouse row as an OTLP span. `variant` alternates the spellings OTLP
    allows: typed or string attribute values, times as strings or numbers, enums
    as numbers or names, ids in hex or base64."""
    as_base64 = variant % 3 == 2
    start = nanos(row["Timestamp"])
    span = {
        "traceId": hex_or_base64(row["TraceId"], as_base64),
        "spanId": hex_or_base64(row["SpanId"], as_base64),
        "name": row["SpanName"],
        "kind": KINDS[row["SpanKind"]] if variant % 2 else f"SPAN_KIND_{row['SpanKind'].upper()}",
        "startTimeUnixNano": str(start) if variant % 2 else start,
        "endTimeUnixNano": str(start + int(row["Duration"])),
        "attributes": otlp_attributes(row["SpanAttributes"], with_types=variant % 2 == 0),
        "status": {"code": STATUS[row["StatusCode"]] if variant % 2 else f"STATUS_CODE_{row['StatusCode'].upper()}"},
    }
    if row["ParentSpanId"]:
        span["parentSpanId"] = hex_or_base64(row["ParentSpanId"], as_base64)
    if row["TraceState"]:
        span["traceState"] = row["TraceState"]
    if row["StatusMessage"]:
        span["status"]["message"] = row["StatusMessage"]
    times = event_times(column(row, "EventsTimestamp"))
    span["events"] = [
        {"timeUnixNano": str(t), "name": n, "attributes": otlp_attributes(a, with_types=False)}
        for t, n, a in zip(times, column(row, "EventsName"), column(row, "EventsAttributes"))
    ]
    span["links"] = [
        {"traceId": t, "spanId": s, "traceState": ts, "attributes": otlp_attributes(a, with_types=False)}
        for t, s, ts, a in zip(*(column(row, f"Links{c}") for c in ("TraceId", "SpanId", "TraceState", "Attributes")))
    ]
    return span


def resource_spans(rows: list[dict], first_variant: int = 0) -> list[dict]:
    """Rows grouped as OTLP groups them: by resource, then by scope, in order of
    first appearance."""
    groups: dict[str, dict[tuple[str, str], list[dict]]] = {}
    for i, row in enumerate(rows):
        resource = json.dumps(row["ResourceAttributes"], sort_keys=True)
        scope = (row["ScopeName"], row["ScopeVersion"])
        groups.setdefault(resource, {}).setdefault(scope, []).append(otlp_span(row, first_variant + i))
    return [
        {
            "resource": {"attributes": otlp_attributes(json.loads(resource), with_types=False)},
            "scopeSpans": [{"scope": {"name": n, "version": v}, "spans": spans} for (n, v), spans in scopes.items()],
        }
        for resource, scopes in groups.items()
    ]


def rows_of(path: Path) -> list[dict]:
    data = json.loads(path.read_text())
    return data if isinstance(data, list) else [r for rows in data.values() for r in rows]


def one_document(rows):
    return json.dumps({"resourceSpans": resource_spans(rows)}, indent=1)


def json_lines(rows, per_line=7):
    """The Collector's file exporter: one request per line."""
    return "".join(
        json.dumps({"resourceSpans": resource_spans(rows[i : i + per_line], i)}) + "\n" for i in range(0, len(rows), per_line)
    )


def one_resource_per_span(rows):
    return json.dumps({"resourceSpans": [rs for i, row in enumerate(rows) for rs in resource_spans([row], i)]})


LAYOUTS = {"document": one_document, "lines": json_lines, "resource per span": one_resource_per_span}


# -- the graph ----------------------------------------------------------------------------


def graph_of(kg, sessions) -> dict:
    out = {}
    for session in sorted(sessions):
        nodes, links = session_snapshot(kg, session)
        nodes = [
            json.dumps({**json.loads(n), "p": {k: v for k, v in json.loads(n)["p"].items() if k not in BOOKKEEPING}}, sort_keys=True)
            for n in nodes
        ]
        out[session] = (sorted(nodes), links)
    return out


def empty(kg):
    kg.backend.query("MATCH (n) DETACH DELETE n")


@pytest.fixture(scope="module")
def originals(real_traces, kg):
    empty(kg)
    report = ingest_paths([real_traces / f for f in FILES], kg)
    assert not report.problems and not report.file_errors
    graph = graph_of(kg, report.sessions)
    assert len(graph) == 4 and all(nodes for nodes, _ in graph.values())
    return report, graph


@pytest.mark.parametrize("layout", LAYOUTS)
def test_real_traces_as_otlp_give_the_same_graph(layout, real_traces, originals, kg, tmp_path):
    want_report, want = originals
    paths = []
    for name in FILES:
        path = tmp_path / name.replace(".json", ".otlp")  # the extension plays no part
        path.write_text(LAYOUTS[layout](rows_of(real_traces / name)))
        assert detect_layout(path) == OTLP
        paths.append(path)
    empty(kg)
    report = ingest_paths(paths, kg)
    assert report.problems == [] and report.file_errors == [] and report.notice_count == want_report.notice_count
    assert report.rows == want_report.rows and report.spans == want_report.spans
    assert sorted(report.sessions) == sorted(want_report.sessions)
    assert graph_of(kg, report.sessions) == want
    assert orphans(kg) == []


@pytest.mark.parametrize("file", FILES)
def test_rows_convert_exactly(file, real_traces):
    """Column by column, what the graph does not show: every column the exporter
    writes, attribute text included, typed values written back as the same text."""
    originals = rows_of(real_traces / file)
    document = json.dumps({"resourceSpans": resource_spans(originals)}).encode()
    rows = {item.row["SpanId"]: item.row for item in iter_spans(io.BytesIO(document).read)}
    assert len(rows) == len(originals)
    for original in originals:
        row = rows[original["SpanId"]]
        assert nanos(row["Timestamp"]) == nanos(original["Timestamp"])
        assert [nanos(t) for t in row["EventsTimestamp"]] == event_times(column(original, "EventsTimestamp"))
        for key in EXPORTER_COLUMNS:
            assert row[key] == column(original, key), key


# -- broken and unusual OTLP input ----------------------------------------------------------

T0 = 1_750_000_000_000_000_000
TRACE = "0af7651916cd43dd8448eb211c80319c"


def sid(n: int) -> str:
    return f"{n:016x}"


def span(n, name, parent=None, start=0, duration=1_000_000_000, session="otlp-s", **fields):
    out = {
        "traceId": TRACE,
        "spanId": sid(n),
        "name": name,
        "startTimeUnixNano": str(T0 + start),
        "endTimeUnixNano": str(T0 + start + duration),
        "attributes": [{"key": "session.id", "value": {"stringValue": session}}],
    }
    if parent is not None:
        out["parentSpanId"] = sid(parent)
    out.update(fields)
    return out


def document(*spans, resource=None, **block):
    resource = resource or {"attributes": [{"key": "service.name", "value": {"stringValue": "app"}}]}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"scope": {"name": "sdk"}, "spans": list(spans)}], **block}]}


def write_lines(path, *documents):
    path.write_text("".join((d if isinstance(d, str) else json.dumps(d)) + "\n" for d in documents))
    return path


def attribute(key, value):
    return {"key": key, "value": value}


BAD_SPANS = {  # span -> what its reason must say
    "no spanId": ({k: v for k, v in span(20, "a.tool", 1).items() if k != "spanId"}, "no spanId"),
    "time": (span(21, "a.tool", 1, startTimeUnixNano="soon"), "startTimeUnixNano 'soon' is not a whole number"),
    "int": (
        span(22, "a.chat", 1, attributes=[attribute("session.id", {"stringValue": "otlp-s"}), attribute("gen_ai.usage.input_tokens", {"intValue": "x"})]),
        "attributes[1] ('gen_ai.usage.input_tokens').intValue 'x' is not an integer",
    ),
    "kind": (span(23, "a.tool", 1, kind=9), "kind 9 is not one of 0-5"),
    "end": (span(24, "a.tool", 1, endTimeUnixNano=str(T0 - 1)), "endTimeUnixNano"),
    "string": ("not a span", "the span is a string, not an object"),
    "type": (span(26, "a.tool", 1, attributes=[attribute("session.id", {"stringValue": 5})]), "stringValue is a number, not a string"),
    "trace": (span(27, "a.tool", 1, traceId="xyz"), "traceId 'xyz' is neither 32 hex digits nor base64 of 16 bytes"),
    "bool": (span(28, "a.tool", 1, attributes=[attribute("ok", {"boolValue": "yes"})]), "boolValue 'yes' is not true or false"),
    "event": (span(29, "a.tool", 1, events=[{"timeUnixNano": "later", "name": "x"}]), "events[0].timeUnixNano 'later'"),
    "status": (span(30, "a.tool", 1, status={"code": "STATUS_CODE_MAYBE"}), "status.code 'STATUS_CODE_MAYBE'"),
    "value": (span(31, "a.tool", 1, attributes=[attribute("x", {"fooValue": 1})]), "has no known value type (found fooValue)"),
    "zero id": (span(32, "a.tool", 1, spanId="0" * 16), "spanId '0000000000000000' is all zeros"),
    "session": (span(33, "a.tool", 1, attributes=[]), "no session id"),  # converted, then refused as rows are
}


def test_malformed_spans_are_reported_with_their_reason(kg, tmp_path):
    good = [span(1, "LangGraph.workflow", duration=9_000_000_000), span(2, "search.tool", 1, start=1_000_000)]
    nul = span(3, "bad\u0000name.tool", 1, start=2_000_000)
    bad_resource = {"attributes": [attribute("service.name", {"intValue": "many"})]}
    path = write_lines(
        tmp_path / "spans.jsonl",
        document(*good),
        document(*(s for s, _ in BAD_SPANS.values()), nul),
        document(span(40, "b.tool", 1), resource=bad_resource),
        {"resourceSpans": [{"scopeSpans": {"spans": []}}]},
        {"spans": []},
        "42",
    )
    empty(kg)
    report = ingest_paths([path], kg)
    assert report.sessions == ["otlp-s"] and report.spans == 3 and report.file_errors == []
    reasons = {p.index: p.reason for p in report.problems}
    for i, (name, (_, says)) in enumerate(BAD_SPANS.items()):
        where = f"line 2, resourceSpans[0].scopeSpans[0].spans[{i}]: " if name != "session" else ""
        assert reasons[2 + i].startswith(where) and says in reasons[2 + i], name
    after = 2 + len(BAD_SPANS) + 1
    assert reasons[after].startswith("line 3, resourceSpans[0].scopeSpans[0].spans[0]: its resource cannot be read")
    assert "attributes[0] ('service.name').intValue 'many'" in reasons[after]
    assert reasons[after + 1] == "line 4, resourceSpans[0].scopeSpans is an object, not a list; nothing in it is read"
    assert reasons[after + 2].startswith("line 5, the document has no resourceSpans")
    assert reasons[after + 3].startswith("line 6, the document is a number, not an object")
    assert len(reasons) == len(BAD_SPANS) + 4
    by_index = {p.index: p for p in report.problems}
    assert by_index[3].span_id == sid(21) and by_index[2].span_id is None
    assert [n.index for n in report.notices] == [2 + len(BAD_SPANS)]  # the NUL, kept escaped
    assert "\\u0000" in kg.backend.query("MATCH (t:ToolCall {spanId: $s}) RETURN t.name AS n", {"s": sid(3)})[0]["n"]
    assert orphans(kg) == []

    in_memory = IngestReport()
    spans = collect_spans([path], in_memory)
    assert {p.index: p.reason for p in in_memory.problems} == reasons
    assert len(build_graphs(spans, in_memory)) == 1


@pytest.mark.parametrize("cut", ["lines", "document"])
def test_a_truncated_otlp_file_contributes_nothing(cut, kg, tmp_path):
    begun = [span(10, "LangGraph.workflow", session="begun", duration=9_000_000_000), span(11, "a.tool", 10, session="begun")]
    whole = write_lines(tmp_path / "whole.json", document(span(1, "LangGraph.workflow", session="kept"), begun[0]))
    if cut == "lines":
        text = json.dumps(document(begun[1], span(20, "LangGraph.workflow", session="cut"))) + "\n"
        text += json.dumps(document(span(21, "x.tool", 20, session="cut")))[:-40]
    else:
        text = json.dumps(document(begun[1], span(20, "LangGraph.workflow", session="cut"), span(21, "x.tool", 20, session="cut")))
        text = text[: text.index('"x.tool"')]
    broken = tmp_path / "broken.json"
    broken.write_text(text)
    empty(kg)
    report = ingest_paths([whole, broken], kg)
    assert session_ids(kg) == {"kept"}
    assert len(report.file_errors) == 1 and str(broken) in report.file_errors[0] and "'begun'" not in report.file_errors[0]
    assert "begun" in report.file_errors[0] and "nothing of this file is ingested" in report.file_errors[0]


def test_layout_is_told_by_content(tmp_path):
    files = {
        "rows.jsonl": (json.dumps([{"SpanId": "a"}]), ROWS),
        "sessions.txt": (json.dumps({"s": [{"SpanId": "a"}]}), SESSIONS),
        "document.log": (json.dumps(document(span(1, "w.workflow")), indent=2), OTLP),
        "lines.json": (json.dumps(document(span(1, "w.workflow"))) + "\n" + json.dumps(document(span(2, "w.workflow"))), OTLP),
        "list.json": (json.dumps([document(span(1, "w.workflow")), document(span(2, "w.workflow"))]), OTLP),
        "proto-names.json": (json.dumps({"resource_spans": []}), OTLP),
    }
    for name, (text, layout) in files.items():
        (tmp_path / name).write_text(text)
        assert detect_layout(tmp_path / name) == layout, name
    for text in ("hello", "42", '"spans"', "\n\n"):
        path = tmp_path / "neither.json"
        path.write_text(text)
        with pytest.raises(ExportFormatError, match=re.escape(str(path))) as raised:
            detect_layout(path)
        assert text.strip() == "" or ("ClickHouse" in str(raised.value) and "OTLP" in str(raised.value))
    report = IngestReport()
    collect_spans([tmp_path / "neither.json"], report)
    assert len(report.file_errors) == 1 and str(tmp_path / "neither.json") in report.file_errors[0]


def test_otlp_spellings_give_the_same_rows(tmp_path):
    """Field order, proto field names, the older instrumentation library names, a
    list of documents: all read as the Collector's own spelling."""
    spans = [span(1, "LangGraph.workflow"), span(2, "a.tool", 1, kind="SPAN_KIND_CLIENT", status={"code": 2, "message": "no"})]
    canonical = document(*spans)
    block = canonical["resourceSpans"][0]
    resource_last = {"resourceSpans": [{"scopeSpans": [{"spans": spans, "scope": {"name": "sdk"}}], "resource": block["resource"]}]}

    def snake(value):
        if isinstance(value, dict):
            return {re.sub(r"(?<=[a-z])([A-Z])", r"_\1", k).lower(): snake(v) for k, v in value.items()}
        return [snake(v) for v in value] if isinstance(value, list) else value

    legacy = {"resourceSpans": [{"resource": block["resource"], "instrumentationLibrarySpans": [
        {"instrumentationLibrary": {"name": "sdk"}, "spans": spans}]}]}
    variants = {"resource last": resource_last, "proto names": snake(canonical), "legacy": legacy, "list": [canonical]}

    def rows(doc, name):
        path = tmp_path / name
        path.write_text(json.dumps(doc))
        return [(r.index, r.row, r.problem) for r in iter_rows(path)]

    want = rows(canonical, "canonical.json")
    assert [r[1]["SpanId"] for r in want] == [sid(1), sid(2)] and want[1][1]["StatusCode"] == "Error"
    for name, doc in variants.items():
        assert rows(doc, name + ".json") == want, name


def test_ingest_help_names_both_layouts():
    from mce_dagster.cli import app

    result = CliRunner().invoke(app, ["ingest", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "ClickHouse" in result.output and "OTLP JSON" in result.output and "resourceSpans" in result.output


@pytest.mark.parametrize(
    "value, text",
    [
        ({"stringValue": "x"}, "x"),
        ({}, ""),
        ({"boolValue": False}, "false"),
        ({"intValue": "-12"}, "-12"),
        ({"int_value": 7}, "7"),
        ({"doubleValue": 2.0}, "2"),
        ({"doubleValue": "0.25"}, "0.25"),
        ({"doubleValue": 1e21}, "1e+21"),
        ({"doubleValue": 1.5e-7}, "1.5e-7"),
        ({"doubleValue": 123456789012345680.0}, "123456789012345680"),
        ({"doubleValue": "NaN"}, "NaN"),
        ({"bytesValue": "aGk="}, "aGk="),
        ({"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": "1"}, {"boolValue": True}, {}]}}, '["a",1,true,null]'),
        ({"kvlistValue": {"values": [{"key": "b", "value": {"intValue": 2}}, {"key": "a", "value": {"arrayValue": {}}}]}}, '{"a":[],"b":2}'),
    ],
)
def test_attribute_values_as_the_exporter_writes_them(value, text):
    assert attributes([{"key": "k", "value": value}], "attributes") == {"k": text}


@pytest.mark.parametrize(
    "value, reason",
    [
        ({"intValue": "9223372036854775808"}, "attributes[0] ('k').intValue '9223372036854775808' is out of the 64-bit range"),
        ({"doubleValue": "many"}, "attributes[0] ('k').doubleValue 'many' is not a number"),
        ({"bytesValue": "not base64!"}, "attributes[0] ('k').bytesValue 'not base64!' is not base64"),
        ({"arrayValue": {"values": [{"intValue": 1.5}]}}, "attributes[0] ('k').arrayValue.values[0].intValue 1.5 is not an integer"),
        ({"kvlistValue": {"values": [{"key": 3}]}}, "attributes[0] ('k').kvlistValue.values[0].key is a number, not a string"),
        ("text", "attributes[0] ('k') is a string, not an object"),
    ],
)
def test_bad_attribute_values_name_the_field(value, reason):
    with pytest.raises(OtlpError) as raised:
        attributes([{"key": "k", "value": value}], "attributes")
    assert str(raised.value) == reason
