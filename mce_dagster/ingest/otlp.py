"""OTLP JSON (the Collector's `file` exporter, the OTLP/HTTP JSON body) -> span rows
in the ClickHouse exporter's layout, so that every ingestion rule applies to them
unchanged.

A file holds one or more documents (`{"resourceSpans": [...]}`, one per line or
one in all, or a JSON list of them). Parse events are walked as they come: memory
holds one span at a time, not a document. A span that cannot be converted (no
spanId, a bad time, a value of the wrong type) becomes a problem naming the field
and its position; it never fails another span.

Attribute values become text the way the ClickHouse exporter writes them
(`pcommon.Value.AsString`): numbers in decimal, booleans as `true`/`false`, arrays
and key-value lists as JSON, bytes as base64.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from typing import Any

import ijson
from ijson.utils import sendable_list

# Keys a document may start with: what tells an OTLP file from the ClickHouse layout.
DOCUMENT_KEYS = frozenset({"resourceSpans", "resource_spans"})

_INT64 = 2**63
_CHUNK = 1 << 16


class OtlpError(ValueError):
    """A part of a span that cannot be converted; the message names the field."""


# -- names ------------------------------------------------------------------------

# Protobuf JSON parsers accept the proto field names too; Collectors before 0.60
# wrote instrumentation library spans where scope spans are now.
_STRUCTURE_KEYS = {
    "resource_spans": "resourceSpans",
    "scope_spans": "scopeSpans",
    "instrumentationLibrarySpans": "scopeSpans",
    "instrumentation_library_spans": "scopeSpans",
    "instrumentationLibrary": "scope",
    "instrumentation_library": "scope",
}
_CAMEL_HUMP = re.compile(r"(?<=[a-z])([A-Z])")


@lru_cache(maxsize=256)
def _snake(name: str) -> str:
    return _CAMEL_HUMP.sub(r"_\1", name).lower()


def _field(obj: dict[str, Any], name: str) -> Any:
    """A field by its JSON name or its proto name; null counts as absent."""
    value = obj.get(name)
    return obj.get(_snake(name)) if value is None else value


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list", dict: "an object"}.get(
        type(value), type(value).__name__
    )


def _object(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise OtlpError(f"{where} is {_type_name(value)}, not an object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise OtlpError(f"{where} is {_type_name(value)}, not a list")
    return value


def _string(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise OtlpError(f"{where} is {_type_name(value)}, not a string")
    return value


# -- values -------------------------------------------------------------------------


_DECIMAL = re.compile(r"\s*-?[0-9]+\s*")


def _integer(value: Any, where: str) -> int:
    """An int64 as protobuf JSON writes it: a number or a decimal string."""
    if isinstance(value, bool):
        raise OtlpError(f"{where} {value!r} is not an integer")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and _DECIMAL.fullmatch(value):
        number = int(value)
    else:
        raise OtlpError(f"{where} {value!r} is not an integer")
    if not -_INT64 <= number < _INT64:
        raise OtlpError(f"{where} {value!r} is out of the 64-bit range")
    return number


_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _double(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise OtlpError(f"{where} {value!r} is not a number")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        if value in _NON_FINITE:
            return _NON_FINITE[value]
        try:
            number = float(value)
        except ValueError:
            pass
        else:
            if math.isfinite(number):
                return number
    raise OtlpError(f"{where} {value!r} is not a number")


def double_text(number: float) -> str:
    """A double as Go's collector writes it: the shortest digits that read back the
    same, in plain notation from 1e-6 up to 1e21 and with an exponent outside."""
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    if number == 0:
        return "0"
    text = repr(number)
    if 1e-6 <= abs(number) < 1e21:
        if "e" in text:
            text = format(Decimal(text), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    mantissa, _, exponent = text.partition("e")
    mantissa = mantissa.removesuffix(".0")
    return f"{mantissa}e{exponent[0]}{exponent[1:].lstrip('0')}"


_VALUE_KEYS = ("stringValue", "boolValue", "intValue", "doubleValue", "arrayValue", "kvlistValue", "bytesValue")
_VALUE_KIND = {**{k: k for k in _VALUE_KEYS}, **{_snake(k): k for k in _VALUE_KEYS}}


def _value_kind(value: dict[str, Any], where: str) -> tuple[str, Any]:
    for key, inner in value.items():
        kind = _VALUE_KIND.get(key)
        if kind is not None:
            return kind, inner
    if value:
        raise OtlpError(f"{where} has no known value type (found {', '.join(sorted(map(str, value)))})")
    return "", None  # an empty value


def any_value(value: Any, where: str) -> Any:
    """An OTLP AnyValue as a plain JSON value (bytes as base64 text, a double that
    is not finite as its text)."""
    kind, inner = _value_kind(_object(value, where), where)
    if kind == "stringValue" and type(inner) is str:
        return inner
    if kind == "" or inner is None:
        return None
    if kind == "stringValue":
        return _string(inner, f"{where}.stringValue")
    if kind == "boolValue":
        if not isinstance(inner, bool):
            raise OtlpError(f"{where}.boolValue {inner!r} is not true or false")
        return inner
    if kind == "intValue":
        return _integer(inner, f"{where}.intValue")
    if kind == "doubleValue":
        number = _double(inner, f"{where}.doubleValue")
        return number if math.isfinite(number) else double_text(number)
    if kind == "bytesValue":
        text = _string(inner, f"{where}.bytesValue")
        try:
            base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_" if "-" in text or "_" in text else None, validate=True)
        except (binascii.Error, ValueError):
            raise OtlpError(f"{where}.bytesValue {text!r} is not base64") from None
        return text
    if kind == "arrayValue":
        items = _list(_field(_object(inner, f"{where}.arrayValue"), "values"), f"{where}.arrayValue.values")
        return [any_value(item, f"{where}.arrayValue.values[{i}]") for i, item in enumerate(items)]
    pairs = _list(_field(_object(inner, f"{where}.kvlistValue"), "values"), f"{where}.kvlistValue.values")
    return attributes_raw(pairs, f"{where}.kvlistValue.values")


def attributes_raw(items: Any, where: str, first: int = 0) -> dict[str, Any]:
    """`first`: the position of items[0] in the list the caller reports on."""
    out: dict[str, Any] = {}
    for i, item in enumerate(_list(items, where), first):
        item = _object(item, f"{where}[{i}]")
        key = _field(item, "key")
        if not isinstance(key, str):
            raise OtlpError(f"{where}[{i}].key is {_type_name(key)}, not a string")
        out[key] = any_value(_field(item, "value"), f"{where}[{i}] ({key!r})")
    return out


def value_text(value: Any) -> str:
    """A plain value as the ClickHouse exporter's text column holds it."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return double_text(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def attributes(items: Any, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for i, item in enumerate(_list(items, where)):
        # Nearly every attribute is a string: taken without the general walk.
        if type(item) is dict:
            key, value = item.get("key"), item.get("value")
            if type(key) is str and type(value) is dict and len(value) == 1 and type(value.get("stringValue")) is str:
                out[key] = value["stringValue"]
                continue
        for key, value in attributes_raw([item], where, i).items():
            out[key] = value_text(value)
    return out


# -- ids, times, codes ----------------------------------------------------------------

_HEX = re.compile(r"[0-9a-fA-F]*")


def span_id_text(value: Any, where: str, size: int, required: bool = True) -> str:
    """A trace or span id as lowercase hex. The Collector writes hex; base64 of the
    same bytes is accepted too, since the lengths tell the two apart (32 or 16 hex
    digits, 24 or 12 base64 characters with padding, 22 or 11 without)."""
    if value is None or value == "":
        if required:
            raise OtlpError(f"no {where}")
        return ""
    if not isinstance(value, str):
        raise OtlpError(f"{where} is {_type_name(value)}, not a string")
    if len(value) == 2 * size and _HEX.fullmatch(value):
        raw = bytes.fromhex(value)
    else:
        try:
            altchars = b"-_" if "-" in value or "_" in value else None
            raw = base64.b64decode(value + "=" * (-len(value) % 4), altchars=altchars, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != size:
            raise OtlpError(f"{where} {value!r} is neither {2 * size} hex digits nor base64 of {size} bytes")
    if not any(raw):
        if required:
            raise OtlpError(f"{where} {value!r} is all zeros, which is not an id")
        return ""  # an all-zero parent: a root
    return raw.hex()


def unix_nano(value: Any, where: str, required: bool = True) -> int:
    if value is None or (not isinstance(value, bool) and value in ("", 0, "0")):
        if required:
            raise OtlpError(f"no {where}")
        return 0
    try:
        ns = _integer(value, where)
    except OtlpError:
        raise OtlpError(f"{where} {value!r} is not a whole number of nanoseconds since 1970") from None
    if not 0 <= ns < _INT64:
        raise OtlpError(f"{where} {value!r} is out of range (years 1970 to 2262)")
    return ns


def timestamp_text(ns: int) -> str:
    """Unix nanoseconds as the ISO 8601 text of a ClickHouse DateTime64(9), exactly."""
    seconds, nanos = divmod(ns, 10**9)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{nanos:09d}Z"


_KINDS = ("Unspecified", "Internal", "Server", "Client", "Producer", "Consumer")
_STATUS_CODES = ("Unset", "Ok", "Error")


def _enum(value: Any, names: tuple[str, ...], prefix: str, where: str) -> str:
    """A protobuf enum given as its number or its name, as the ClickHouse exporter
    names it."""
    if value is None:
        return names[0]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return names[value]
    if isinstance(value, str):
        word = value.upper().removeprefix(prefix).replace("_", "")
        for name in names:
            if name.upper() == word:
                return name
    expected = ", ".join(f"{prefix}{n.upper()}" for n in names)
    raise OtlpError(f"{where} {value!r} is not one of 0-{len(names) - 1} or {expected}")


# -- resources, scopes, spans ------------------------------------------------------------


@dataclass(frozen=True)
class Resource:
    attributes: dict[str, str] = field(default_factory=dict)

    @property
    def service(self) -> str:
        return self.attributes.get("service.name", "")


@dataclass(frozen=True)
class Scope:
    name: str = ""
    version: str = ""


def resource_of(value: Any, where: str) -> Resource:
    resource = _object(value, where)
    return Resource(attributes(_field(resource, "attributes"), f"{where}.attributes"))


def scope_of(value: Any, where: str) -> Scope:
    scope = _object(value, where)
    return Scope(_string(_field(scope, "name"), f"{where}.name"), _string(_field(scope, "version"), f"{where}.version"))


def loose_span_id(span: Any) -> str | None:
    """The span's id for a report, however malformed the span."""
    if not isinstance(span, dict):
        return None
    value = _field(span, "spanId")
    try:
        return span_id_text(value, "spanId", 8)
    except OtlpError:
        return value if isinstance(value, str) and value else None


def span_row(span: Any, resource: Resource, scope: Scope) -> dict[str, Any]:
    """One OTLP span as a ClickHouse exporter row. Raises OtlpError naming the field."""
    if not isinstance(span, dict):
        raise OtlpError(f"the span is {_type_name(span)}, not an object")
    span_id = span_id_text(_field(span, "spanId"), "spanId", 8)
    trace_id = span_id_text(_field(span, "traceId"), "traceId", 16)
    parent = span_id_text(_field(span, "parentSpanId"), "parentSpanId", 8, required=False)
    start = unix_nano(_field(span, "startTimeUnixNano"), "startTimeUnixNano")
    end = unix_nano(_field(span, "endTimeUnixNano"), "endTimeUnixNano")
    if end < start:
        raise OtlpError(f"endTimeUnixNano {end} is before startTimeUnixNano {start}")
    status = _object(_field(span, "status"), "status")
    events = [_event(e, f"events[{i}]") for i, e in enumerate(_list(_field(span, "events"), "events"))]
    links = [_link(link, f"links[{i}]") for i, link in enumerate(_list(_field(span, "links"), "links"))]
    return {
        "Timestamp": timestamp_text(start),
        "TraceId": trace_id,
        "SpanId": span_id,
        "ParentSpanId": parent,
        "TraceState": _string(_field(span, "traceState"), "traceState"),
        "SpanName": _string(_field(span, "name"), "name"),
        "SpanKind": _enum(_field(span, "kind"), _KINDS, "SPAN_KIND_", "kind"),
        "ServiceName": resource.service,
        "ResourceAttributes": resource.attributes,
        "ScopeName": scope.name,
        "ScopeVersion": scope.version,
        "SpanAttributes": attributes(_field(span, "attributes"), "attributes"),
        "Duration": end - start,
        "StatusCode": _enum(_field(status, "code"), _STATUS_CODES, "STATUS_CODE_", "status.code"),
        "StatusMessage": _string(_field(status, "message"), "status.message"),
        "EventsTimestamp": [e[0] for e in events],
        "EventsName": [e[1] for e in events],
        "EventsAttributes": [e[2] for e in events],
        "LinksTraceId": [link[0] for link in links],
        "LinksSpanId": [link[1] for link in links],
        "LinksTraceState": [link[2] for link in links],
        "LinksAttributes": [link[3] for link in links],
    }


def _event(value: Any, where: str) -> tuple[str, str, dict[str, str]]:
    event = _object(value, where)
    ns = unix_nano(_field(event, "timeUnixNano"), f"{where}.timeUnixNano", required=False)
    return (
        timestamp_text(ns),
        _string(_field(event, "name"), f"{where}.name"),
        attributes(_field(event, "attributes"), f"{where}.attributes"),
    )


def _link(value: Any, where: str) -> tuple[str, str, str, dict[str, str]]:
    link = _object(value, where)
    return (
        span_id_text(_field(link, "traceId"), f"{where}.traceId", 16),
        span_id_text(_field(link, "spanId"), f"{where}.spanId", 8),
        _string(_field(link, "traceState"), f"{where}.traceState"),
        attributes(_field(link, "attributes"), f"{where}.attributes"),
    )


# -- walking a file ---------------------------------------------------------------------


@dataclass(frozen=True)
class OtlpItem:
    """One span of a file, converted (`row`), or what kept it from being (`problem`)."""

    index: int  # position of the span among the file's spans and problems
    row: dict[str, Any] | None
    problem: str | None = None
    span_id: str | None = None


class _Block:
    """A resourceSpans or scopeSpans entry: its resource or scope, once known."""

    def __init__(self) -> None:
        self.value: Resource | Scope | None = None
        self.error: str | None = None
        self.final = False

    def settle(self, value: Resource | Scope | None = None, error: str | None = None) -> None:
        if not self.final:
            self.value, self.error, self.final = value, error, True


_OBJECT, _LIST = "object", "list"
_R, _S = "resourceSpans", "scopeSpans"
# What each place of a document holds (list indexes written as "#").
_CONTAINERS = {
    (): _OBJECT,
    (_R,): _LIST,
    (_R, "#"): _OBJECT,
    (_R, "#", _S): _LIST,
    (_R, "#", _S, "#"): _OBJECT,
    (_R, "#", _S, "#", "spans"): _LIST,
}
_RESOURCE = (_R, "#", "resource")
_SCOPE = (_R, "#", _S, "#", "scope")
_SPAN = (_R, "#", _S, "#", "spans", "#")
_STARTS = {"start_map": _OBJECT, "start_array": _LIST}
_ENDS = frozenset({"end_map", "end_array"})


def _position(path: tuple[Any, ...]) -> str:
    return "".join(f"[{c}]" if isinstance(c, int) else f".{c}" for c in path).lstrip(".") or "the document"


class _Walker:
    """Parse events of a stream of OTLP documents -> OtlpItems, as each span ends.

    The events inside a span, resource or scope (nearly all of them) go through
    one tight loop that builds the value; the structure around them is walked
    event by event. A span waits only while its resource or scope may still come
    (a writer that puts `resource` after `scopeSpans`); the Collector writes them
    first."""

    def __init__(self) -> None:
        self.frames: list[list[Any]] = []  # [kind, current key or list index]
        self.documents_in_list = False  # a JSON list of documents
        self.has_resource_spans = False
        self.building: list[Any] = []  # the containers of the value being built
        self.key: str | None = None  # the key its next value goes under
        self.skipped = 0  # depth of the container being skipped
        self.captured: tuple[Any, ...] = ()
        self.captured_where = ""
        self.line = 1
        self.resource = _Block()
        self.scope = _Block()
        self.waiting: deque[tuple[int, str, _Block, _Block, Any]] = deque()
        self.index = 0
        self.out: list[OtlpItem] = []

    def feed(self, events: list[tuple[str, Any]]) -> list[OtlpItem]:
        building, key = self.building, self.key
        for event, value in events:
            if building:
                if event == "map_key":
                    key = value
                elif event == "end_map" or event == "end_array":
                    done = building.pop()
                    if not building:
                        self._captured(done)
                else:
                    top = building[-1]
                    if event == "start_map" or event == "start_array":
                        value = {} if event == "start_map" else []
                        building.append(value)
                    if type(top) is dict:
                        top[key] = value
                    else:
                        top.append(value)
            elif self.skipped:
                if event == "start_map" or event == "start_array":
                    self.skipped += 1
                elif event == "end_map" or event == "end_array":
                    self.skipped -= 1
            else:
                self._structure(event, value)
        self.key = key
        out, self.out = self.out, []
        return out

    def _path(self) -> tuple[Any, ...]:
        path = tuple(frame[1] for frame in self.frames)
        return path[1:] if self.documents_in_list else path

    def _where(self, path: tuple[Any, ...]) -> str:
        place = _position(path)
        if self.documents_in_list:
            place = f"[{self.frames[0][1]}].{place}" if path else f"document [{self.frames[0][1]}]"
        return f"line {self.line}, {place}"

    def _problem(self, reason: str) -> None:
        self.out.append(OtlpItem(self.index, None, reason))
        self.index += 1

    def _structure(self, event: str, value: Any) -> None:
        if event == "map_key":
            key = _STRUCTURE_KEYS.get(value, value)
            self.frames[-1][1] = key
            if key == _R and len(self.frames) == 1 + self.documents_in_list:
                self.has_resource_spans = True
        elif event in _ENDS:
            self.frames.pop()
            if self.documents_in_list and not self.frames:
                self.documents_in_list = False
            else:
                self._closed(self._path())
        else:
            self._value_starts(event, value)

    def _value_starts(self, event: str, value: Any) -> None:
        if not self.frames and event == "start_array":
            self.documents_in_list = True
            self.frames.append([_LIST, -1])
            return
        if self.frames and self.frames[-1][0] == _LIST:
            self.frames[-1][1] += 1
        path = self._path()
        shape = tuple("#" if isinstance(c, int) else c for c in path)
        if shape in (_RESOURCE, _SCOPE, _SPAN):
            self.captured, self.captured_where = path, self._where(path)
            if event in _STARTS:
                self.building.append({} if event == "start_map" else [])
            else:
                self._captured(value)
            return
        expected = _CONTAINERS.get(shape)
        if expected is not None and _STARTS.get(event) == expected:
            self.frames.append([expected, -1 if expected == _LIST else None])
            self._opened(shape)
            return
        # null in a place of the structure is an empty one, except as a document.
        if expected is not None and (event != "null" or shape == ()):
            found = {"start_map": "an object", "start_array": "a list"}.get(event) or _type_name(value)
            wanted = "an object" if expected == _OBJECT else "a list"
            self._problem(f"{self._where(path)} is {found}, not {wanted}; nothing in it is read")
        if event in _STARTS:
            self.skipped = 1

    def _opened(self, shape: tuple[str, ...]) -> None:
        if shape == ():
            self.has_resource_spans = False
        elif shape == (_R, "#"):
            self.resource = _Block()
        elif shape == (_R, "#", _S, "#"):
            self.scope = _Block()

    def _captured(self, value: Any) -> None:
        where = self.captured_where
        if self.captured[-1] == "resource":
            try:
                self.resource.settle(resource_of(value, "resource"))
            except OtlpError as exc:
                self.resource.settle(error=f"its resource cannot be read ({where}): {exc}")
        elif self.captured[-1] == "scope":
            try:
                self.scope.settle(scope_of(value, "scope"))
            except OtlpError as exc:
                self.scope.settle(error=f"its scope cannot be read ({where}): {exc}")
        else:
            self.waiting.append((self.index, where, self.resource, self.scope, value))
            self.index += 1
        self._ready()

    def _closed(self, path: tuple[Any, ...]) -> None:
        shape = tuple("#" if isinstance(c, int) else c for c in path)
        if shape == (_R, "#"):
            self.resource.settle(Resource())
        elif shape == (_R, "#", _S, "#"):
            self.scope.settle(Scope())
        elif shape == () and not self.has_resource_spans:
            self._problem(f"{self._where(path)} has no resourceSpans: not an OTLP trace document; nothing in it is read")
        self._ready()

    def _ready(self) -> None:
        while self.waiting and self.waiting[0][2].final and self.waiting[0][3].final:
            index, where, resource, scope, span = self.waiting.popleft()
            self.out.append(_convert(index, where, resource, scope, span))


def _convert(index: int, where: str, resource: _Block, scope: _Block, span: Any) -> OtlpItem:
    span_id = loose_span_id(span)
    for block in (resource, scope):
        if block.error is not None:
            return OtlpItem(index, None, f"{where}: {block.error}", span_id)
    try:
        row = span_row(span, resource.value or Resource(), scope.value or Scope())
    except OtlpError as exc:
        return OtlpItem(index, None, f"{where}: {exc}", span_id)
    return OtlpItem(index, row, None, row["SpanId"])


def _pieces(read: Callable[[int], bytes]) -> Iterator[tuple[int, bytes]]:
    """The stream in pieces that each lie on one line, with that line's number."""
    line = 1
    while chunk := read(_CHUNK):
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            yield line, chunk[start : end + 1]
            line += 1
            start = end + 1
        if start < len(chunk):
            yield line, chunk[start:]


def iter_spans(read: Callable[[int], bytes]) -> Iterator[OtlpItem]:
    """The spans of a stream of OTLP JSON documents, in order. Raises ijson's
    errors where the stream stops being JSON (items already yielded stay yielded)."""
    walker = _Walker()
    events = sendable_list()
    parser = ijson.basic_parse_coro(events, multiple_values=True, use_float=True)
    for line, piece in _pieces(read):
        parser.send(piece)
        walker.line = line
        yield from walker.feed(events)
        del events[:]
    parser.close()
    yield from walker.feed(events)
