"""One OpenTelemetry span row (ClickHouse exporter layout) -> a parsed span.

Pure: no I/O. A row that cannot be placed raises `RowError` with the reason.
Every value a parsed span carries is one the graph can store: strings without
NUL or unpaired surrogates (those are kept as `\\uXXXX` escapes), finite floats,
integers within 64 bits.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.ontology import Label
from ..core.storable import UNCARRIABLE, escaped, has_uncarriable
from ..errors import InputError


class RowError(InputError, ValueError):
    """A span row that cannot be placed (no session id, bad timestamp, ...)."""


_INT64 = 2**63


def row_text(row: Any) -> str:
    """The row as canonical JSON: what its digest is taken of."""
    return json.dumps(row, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=repr)


def row_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def carriable(value: Any, text: str | None = None) -> tuple[Any, int]:
    """`value` (a JSON value) with every character the graph cannot store written
    as a `\\uXXXX` escape, and how many were. `text`: its `row_text`, when known."""
    text = row_text(value) if text is None else text
    # json.dumps writes NUL as an escape and keeps unpaired surrogates as they are.
    if "\\u0000" not in text and (text.isascii() or not UNCARRIABLE.search(text)):
        return value, 0
    count = [0]
    return escaped(value, count), count[0]


def _text(value: Any) -> str | None:
    """A value as the text the graph stores: None for absent or empty."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return str(value).lower() if isinstance(value, bool) else str(value)


_TIMESTAMP = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?$"
)


def parse_timestamp(value: Any) -> float:
    """Unix seconds (see parse_timestamp_ns)."""
    return parse_timestamp_ns(value) / 1e9


def parse_timestamp_ns(value: Any) -> int:
    """Unix nanoseconds, exactly, from ISO 8601 (with or without `Z`, up to
    nanoseconds; UTC when no offset is given) or from a number of nanoseconds or
    seconds."""
    if isinstance(value, bool):
        raise RowError(f"bad Timestamp {value!r}")
    if isinstance(value, int):
        return _in_range(value if value > 10**14 else value * 10**9, value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise RowError(f"bad Timestamp {value!r}")
        return _in_range(int(value) if value > 1e14 else round(value * 1e9), value)
    if not isinstance(value, str):
        raise RowError(f"bad Timestamp {value!r}")
    match = _TIMESTAMP.match(value.strip())
    if not match:
        raise RowError(f"bad Timestamp {value!r}")
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        whole = calendar.timegm(
            (int(year), int(month), int(day), int(hour), int(minute), int(second), 0, 0, 0)
        )
    except (ValueError, OverflowError) as exc:
        raise RowError(f"bad Timestamp {value!r}: {exc}") from None
    if not (1 <= int(month) <= 12 and 1 <= int(day) <= 31 and int(hour) < 24 and int(minute) < 60 and int(second) < 61):
        raise RowError(f"bad Timestamp {value!r}")
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        whole -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    nanos = int(fraction.ljust(9, "0")) if fraction else 0
    return _in_range(whole * 10**9 + nanos, value)


def _in_range(ns: int, value: Any) -> int:
    if not -_INT64 < ns < _INT64:
        raise RowError(f"Timestamp {value!r} is out of range (years 1678 to 2262)")
    return ns


def _duration_ns(value: Any) -> int:
    if isinstance(value, bool):
        raise RowError(f"bad Duration {value!r}")
    if isinstance(value, int):
        ns = value
    elif isinstance(value, float) and value.is_integer():
        ns = int(value)
    elif isinstance(value, str) and value.strip().isdigit():
        ns = int(value.strip())
    else:
        raise RowError(f"bad Duration {value!r} (integer nanoseconds expected)")
    if ns < 0:
        raise RowError(f"negative Duration {value!r}")
    if ns >= _INT64:
        raise RowError(f"Duration {value!r} is out of range")
    return ns


def _int(attrs: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = attrs.get(key)
        if value in (None, ""):
            continue
        if isinstance(value, str) and value.strip().isdigit():
            number: float | int = int(value.strip())
        else:
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise RowError(f"attribute {key} is not a number: {value!r}") from None
            if isinstance(value, bool) or not math.isfinite(number) or not number.is_integer():
                raise RowError(f"attribute {key} is not a token count: {value!r}")
        if not 0 <= number < _INT64:
            raise RowError(f"attribute {key} is not a token count: {value!r}")
        return int(number)
    return None


def _first(attrs: Mapping[str, Any], *keys: str) -> str | None:
    for key in keys:
        text = _text(attrs.get(key))
        if text is not None:
            return text
    return None


# Span kinds as SDKs spell them -> what the span is.
_KIND_WORDS: dict[str, str] = {
    "workflow": "mas",
    "graph": "mas",
    "agent": "agent",
    "invoke_agent": "agent",
    "create_agent": "agent",
    "task": "task",
    "chain": "task",
    "retriever": "task",
    "embedding": "task",
    "reranker": "task",
    "tool": "tool",
    "execute_tool": "tool",
    "llm": "llm",
    "chat": "llm",
    "text_completion": "llm",
    "generate_content": "llm",
}
_SUFFIXES: tuple[tuple[str, str], ...] = (
    (".chat", "llm"),
    (".tool", "tool"),
    (".agent", "agent"),
    (".workflow", "mas"),
    (".graph", "mas"),
    (".task", "task"),
)


def span_kind(name: str, attrs: Mapping[str, Any]) -> str | None:
    """'mas', 'agent', 'task', 'llm', 'tool', or None for a span that is not a call."""
    for key in ("traceloop.span.kind", "ioa_observe.span.kind", "openinference.span.kind", "gen_ai.operation.name"):
        value = attrs.get(key)
        if isinstance(value, str) and value.lower() in _KIND_WORDS:
            return _KIND_WORDS[value.lower()]
    for suffix, kind in _SUFFIXES:
        if name.endswith(suffix):
            return kind
    if attrs.get("llm.request.type") or (
        attrs.get("gen_ai.system") and _first(attrs, "gen_ai.request.model", "gen_ai.response.model")
    ):
        return "llm"
    return None


def _strip_suffix(name: str) -> str:
    for suffix, _ in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _events(row: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    names = row.get("EventsName", row.get("Events.Name")) or []
    attributes = row.get("EventsAttributes", row.get("Events.Attributes")) or []
    if not isinstance(names, list):
        return []
    out = []
    for i, name in enumerate(names):
        attrs = attributes[i] if isinstance(attributes, list) and i < len(attributes) else {}
        out.append((_text(name) or "", attrs if isinstance(attrs, Mapping) else {}))
    return out


def _indexed(attrs: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """`prefix.{i}.{field}` attributes as a list of dicts, by i."""
    items: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        index, _, rest = key[len(prefix) :].partition(".")
        if index.isdigit() and rest:
            items.setdefault(int(index), {})[rest] = value
    return [items[i] for i in sorted(items)]


def _messages(attrs: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    out = []
    for item in _indexed(attrs, prefix):
        message = {k: item[k] for k in ("role", "content") if k in item}
        if "finish_reason" in item:
            message["finish_reason"] = _text(item["finish_reason"])
        tool_calls = [item[k] for k in sorted(item) if k.startswith("tool_calls.") and k.endswith(".name")]
        if tool_calls:
            message["tool_calls"] = tool_calls
        out.append(message)
    return out


@dataclass
class ParsedSpan:
    session_id: str
    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: str | None  # see span_kind
    start_ns: int
    end_ns: int
    duration_ms: float
    service: str | None
    success: bool | None
    error_message: str | None
    props: dict[str, Any] = field(default_factory=dict)  # label-specific properties
    agent_hint: str | None = None  # `agent_id`: the agent the span ran for
    input_text: str | None = None
    output_text: str | None = None
    tools_offered: list[dict[str, Any]] = field(default_factory=list)
    llm_provider: str | None = None
    escaped: int = 0  # characters of the row kept as \\uXXXX escapes

    @property
    def start(self) -> float:
        return self.start_ns / 1e9

    @property
    def end(self) -> float:
        return self.end_ns / 1e9


def session_of(row: Mapping[str, Any], hint: str | None = None) -> str:
    attrs = row.get("SpanAttributes")
    if not isinstance(attrs, Mapping):
        raise RowError("SpanAttributes is missing or not an object")
    session = attrs.get("session.id") or attrs.get("execution.id") or hint
    if not session:
        raise RowError("no session id (SpanAttributes session.id or execution.id)")
    if not isinstance(session, str):
        raise RowError(f"the session id must be a string, not {session!r}")
    if has_uncarriable(session):
        raise RowError(f"the session id {session!r} holds a NUL or an unpaired surrogate, which the graph cannot store")
    return session


def _identity(row: Mapping[str, Any], key: str) -> str:
    value = row.get(key)
    if not value:
        raise RowError(f"no {key}")
    if not isinstance(value, str):
        raise RowError(f"{key} must be a string, not {value!r}")
    if has_uncarriable(value):
        raise RowError(f"{key} {value!r} holds a NUL or an unpaired surrogate, which the graph cannot store")
    return value


def parse_row(row: Mapping[str, Any], session_hint: str | None = None, text: str | None = None) -> ParsedSpan:
    """`session_hint` is the session id a file's object layout files the row under;
    the row's own attribute wins. `text`: the row's `row_text`, when known."""
    if not isinstance(row, Mapping):
        raise RowError(f"a span row must be an object, not {type(row).__name__}")
    session_id = session_of(row, session_hint)
    span_id = _identity(row, "SpanId")
    trace_id = _identity(row, "TraceId")
    parent = row.get("ParentSpanId")
    if parent is not None and not isinstance(parent, str):
        raise RowError(f"ParentSpanId must be a string, not {parent!r}")
    if span_id == session_id:
        raise RowError(f"SpanId {span_id!r} is the id of its own session")
    row, escaped = carriable(row, text)
    attrs: Mapping[str, Any] = row["SpanAttributes"]
    if "Timestamp" not in row:
        raise RowError("no Timestamp")
    start_ns = parse_timestamp_ns(row["Timestamp"])
    duration_ns = _duration_ns(row.get("Duration", 0))
    name = _text(row.get("SpanName")) or ""
    kind = span_kind(name, attrs)

    status = str(row.get("StatusCode") or "").upper()
    exceptions = [a for n, a in _events(row) if n == "exception"]
    entity_error = _first(attrs, "traceloop.entity.error", "ioa_observe.entity.error", "error.message")
    failed = status in ("ERROR", "STATUS_CODE_ERROR") or bool(exceptions) or entity_error is not None
    failed = failed or str(attrs.get("execution.success", "")).lower() == "false"
    if failed:
        success: bool | None = False
    elif status in ("OK", "STATUS_CODE_OK") or str(attrs.get("execution.success", "")).lower() == "true":
        success = True
    else:
        success = None
    error_message = None
    if failed:
        error_message = (
            _text(row.get("StatusMessage"))
            or next((_text(e.get("exception.message")) for e in exceptions if _text(e.get("exception.message"))), None)
            or entity_error
            or "failed"
        )

    span = ParsedSpan(
        session_id=session_id,
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=(row.get("ParentSpanId") or None),
        name=name,
        kind=kind,
        start_ns=start_ns,
        end_ns=start_ns + duration_ns,
        duration_ms=duration_ns / 1e6,
        service=_text(row.get("ServiceName")),
        success=success,
        error_message=error_message,
        agent_hint=_first(attrs, "agent_id", "gen_ai.agent.name"),
        input_text=_first(attrs, "traceloop.entity.input", "ioa_observe.entity.input", "input.value"),
        output_text=_first(attrs, "traceloop.entity.output", "ioa_observe.entity.output", "output.value"),
        escaped=escaped,
    )
    entity_name = _first(attrs, "ioa_observe.entity.name", "traceloop.entity.name")
    if kind == "agent":
        span.props["agentName"] = _first(attrs, "agent_id", "gen_ai.agent.name") or entity_name or _strip_suffix(name)
    elif kind == "tool":
        span.props["toolName"] = _first(attrs, "gen_ai.tool.name", "tool.name") or entity_name or _strip_suffix(name)
        span.props["toolArguments"] = _first(attrs, "gen_ai.tool.call.arguments", "tool.arguments") or span.input_text
        span.props["errorMessage"] = error_message
    elif kind in ("task", "mas"):
        span.props["taskName"] = entity_name or _strip_suffix(name)
    elif kind == "llm":
        _llm_props(span, attrs)
    return span


def _llm_props(span: ParsedSpan, attrs: Mapping[str, Any]) -> None:
    prompt = _int(attrs, "gen_ai.usage.prompt_tokens", "gen_ai.usage.input_tokens", "llm.token_count.prompt")
    completion = _int(attrs, "gen_ai.usage.completion_tokens", "gen_ai.usage.output_tokens", "llm.token_count.completion")
    total = _int(attrs, "llm.usage.total_tokens", "gen_ai.usage.total_tokens", "llm.token_count.total")
    cache_read = _int(
        attrs,
        "gen_ai.usage.cache_read_input_tokens",
        "gen_ai.usage.cache_read.input_tokens",
        "llm.token_count.prompt_details.cache_read",
    )
    temperature = attrs.get("gen_ai.request.temperature")
    try:
        temperature = None if temperature in (None, "") else float(temperature)
    except (TypeError, ValueError):
        raise RowError(f"attribute gen_ai.request.temperature is not a number: {temperature!r}") from None
    if temperature is not None and not math.isfinite(temperature):
        raise RowError(f"attribute gen_ai.request.temperature is not a number: {temperature!r}")
    provider = _first(attrs, "ioa_observe.association.properties.ls_provider", "gen_ai.provider.name", "gen_ai.system", "llm.provider")
    input_messages = _messages(attrs, "gen_ai.prompt.")
    output_messages = _messages(attrs, "gen_ai.completion.")
    span.llm_provider = provider.lower() if provider else None
    span.props.update(
        modelName=_first(attrs, "gen_ai.response.model", "gen_ai.request.model", "llm.model_name"),
        provider=span.llm_provider,
        promptTokenCount=prompt,
        completionTokenCount=completion,
        totalTokenCount=total,
        cacheReadTokenCount=cache_read,
        temperature=temperature,
        finishReason=next((m["finish_reason"] for m in output_messages if "finish_reason" in m), None),
        inputMessages=json.dumps(input_messages) if input_messages else None,
        outputMessages=json.dumps(output_messages) if output_messages else None,
    )
    span.tools_offered = [
        {"name": _text(f["name"]), "description": _text(f.get("description")), "parameters": _text(f.get("parameters"))}
        for f in _indexed(attrs, "llm.request.functions.")
        if _text(f.get("name"))
    ]


LABEL_OF_KIND: dict[str, Label] = {
    "mas": Label.MAS_CALL,
    "agent": Label.AGENT_CALL,
    "task": Label.TASK_CALL,
    "llm": Label.LLM_CALL,
    "tool": Label.TOOL_CALL,
}


# -- a parsed span kept in the graph, so a later call can map the session anew ----------

# Large texts a span node or its states already hold: not repeated in its record.
_TEXT_PROPS = ("toolArguments", "inputMessages", "outputMessages")


def span_record(span: ParsedSpan) -> str:
    """The span as JSON text, without the texts its node and states hold (see
    `span_from_record`): what `mce ingest` keeps on each span node, so that rows
    of the session arriving later are mapped together with it."""
    record = {k: v for k, v in span.__dict__.items() if k not in ("input_text", "output_text", "props")}
    record["props"] = {k: v for k, v in span.props.items() if k not in _TEXT_PROPS}
    return json.dumps(record, ensure_ascii=False, sort_keys=True)


def span_from_record(record: str, node: Mapping[str, Any], input_text: str | None, output_text: str | None) -> ParsedSpan:
    """The span `span_record` wrote, its texts taken back from its node's
    properties and its input and output states."""
    data = json.loads(record)
    props = data.pop("props")
    for key in _TEXT_PROPS:
        if key in _PROPS_OF_KIND.get(data["kind"], ()):
            props[key] = node.get(key)
    return ParsedSpan(**data, props=props, input_text=input_text, output_text=output_text)


# The text properties each kind puts on its node.
_PROPS_OF_KIND: dict[str | None, tuple[str, ...]] = {
    "tool": ("toolArguments",),
    "llm": ("inputMessages", "outputMessages"),
}
