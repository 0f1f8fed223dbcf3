"""Span export files -> raw rows, streamed. The layout is told by content, not by
name: the ClickHouse exporter's (a JSON list of span rows, or an object mapping a
session id to its rows), or OTLP JSON (documents holding `resourceSpans`, one per
line or one in all, converted to rows of the first layout: see `otlp`). Files are
read incrementally (ijson), never loaded whole.

Bytes pass through `_CarriableBytes` on their way to the parser, so that one odd
value fails its row, never the file: bytes that are not UTF-8 and `\\uD800`-style
escapes of unpaired surrogates (valid JSON that the C parser rejects or turns into
'?') are kept as escaped text, and numbers the parser cannot hold (beyond 64-bit
integers or doubles) become strings, which the row's parsing then refuses or
keeps. Nesting deeper than `MAX_DEPTH` is refused before the parser's memory
grows with the square of the depth.
"""

from __future__ import annotations

import codecs
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import ijson

from ..errors import InputError
from . import otlp

# Span rows nest 5 levels deep; ijson needs O(depth^2) memory.
MAX_DEPTH = 256
_CHUNK = 1 << 16
_MAX_CARRY = 1 << 20


@dataclass(frozen=True)
class RawRow:
    path: Path
    index: int  # position of the row in its file
    row: Any
    session_hint: str | None = None  # the key, in the object layout
    problem: str | None = None  # why a span read from the file has no row
    problem_span_id: str | None = None

    @property
    def span_id(self) -> str | None:
        if self.problem is not None:
            return self.problem_span_id
        span_id = self.row.get("SpanId") if isinstance(self.row, dict) else None
        return span_id if isinstance(span_id, str) else None


class ExportFormatError(InputError, ValueError):
    """A file that is not a span export at all, or that breaks off."""


def _escape_bytes(error: UnicodeDecodeError) -> tuple[str, int]:
    bad = error.object[error.start : error.end]
    return "".join(f"\\\\x{b:02x}" for b in bad), error.end


codecs.register_error("mce_escape_bytes", _escape_bytes)

_SURROGATE_HINT = re.compile(rb"\\u[dD][89a-fA-F]")
# An escaped backslash, a surrogate pair, or an unpaired surrogate escape.
_ESCAPES = re.compile(
    rb"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
)
_STRING_REST = re.compile(rb'(?:[^"\\]++|\\.)*+', re.DOTALL)
_STRINGS = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


# A number in value position with 19+ digits or a 3-digit exponent (hex ids in
# strings never follow a ':', ',' or '[').
_BIG_NUMBER_HINT = re.compile(rb"[:,\[]\s*(-?(?:\d{19}|\d+(?:\.\d+)?[eE][+-]?\d{3}))")
# Text outside strings and whole strings: matched up to a position, it ends there
# exactly when that position is outside every string.
_OUTSIDE = re.compile(rb'(?:[^"]++|"(?:[^"\\]++|\\.)*+")*+', re.DOTALL)
_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_NUMBER_CHARS = frozenset(b"0123456789.eE+-")


def _parser_holds(number: bytes) -> bool:
    if b"." not in number and b"e" not in number and b"E" not in number:
        return abs(int(number)) < 2**63
    return math.isfinite(float(number))


_HIGH_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}")


def _run_start(data: bytes, i: int) -> int:
    """Where the run of backslashes that holds data[i] starts."""
    while i > 0 and data[i - 1] == 0x5C:
        i -= 1
    return i


class _CarriableBytes:
    """A binary file as ijson reads it, with the repairs described above. Chunks
    are cut so that no escape sequence, backslash run or UTF-8 character is split."""

    def __init__(self, f: BinaryIO, path: Path):
        self._f = f
        self._path = path
        self._carry = b""
        self._eof = False
        self._in_string = False
        self._depth = 0
        self.escaped_bytes = 0
        self.escaped_surrogates = 0
        self.quoted_numbers = 0

    def read(self, size: int = -1) -> bytes:
        if size == 0:  # ijson probes the type of what read() returns
            return b""
        while True:
            if self._eof:
                data, self._carry = self._carry, b""
                return self._repair(data) if data else b""
            raw = self._f.read(_CHUNK)
            if not raw:
                self._eof = True
                continue
            data = self._carry + raw
            cut = self._cut(data)
            self._carry = data[cut:]
            if cut:
                return self._repair(data[:cut])

    @staticmethod
    def _cut(data: bytes) -> int:
        cut = len(data)
        # Not inside a number, nor between a number and the ':', ',' or '[' before
        # it (up to a length no real number has).
        while cut > 0 and len(data) - cut < 400 and data[cut - 1] in _NUMBER_CHARS:
            cut -= 1
        while cut > 0 and len(data) - cut < 800 and data[cut - 1] in b" \t\r\n":
            cut -= 1
        if cut > 0 and data[cut - 1] in b":,[":
            cut -= 1
        backslash = data.find(b"\\", max(0, cut - 12), cut)
        if backslash >= 0:
            cut = _run_start(data, backslash)
            # Keep the two halves of a surrogate pair together.
            while cut >= 6 and _HIGH_SURROGATE.fullmatch(data, cut - 6, cut) and _run_start(data, cut - 6) % 2 == (cut - 6) % 2:
                cut = _run_start(data, cut - 6)
            if cut == 0 and len(data) > _MAX_CARRY:  # pathological: escapes for megabytes
                cut = backslash - (backslash - _run_start(data, backslash)) % 2
        # Not inside a UTF-8 character: find where the last one starts.
        start = cut - 1
        while start >= 0 and cut - start < 4 and data[start] & 0xC0 == 0x80:
            start -= 1
        if start >= 0 and data[start] >= 0xC0:
            length = 2 if data[start] < 0xE0 else 3 if data[start] < 0xF0 else 4
            if cut - start < length:
                cut = start
        return cut

    def _repair(self, data: bytes) -> bytes:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("utf-8", errors="mce_escape_bytes")
            self.escaped_bytes += text.count("\\\\x")
            data = text.encode("utf-8")
        if _SURROGATE_HINT.search(data):
            data = _ESCAPES.sub(self._surrogate, data)
        if _BIG_NUMBER_HINT.search(data):
            data = self._quote_big_numbers(data)
        self._guard_depth(data)
        return data

    def _quote_big_numbers(self, data: bytes) -> bytes:
        pos = 0  # a position known to be outside strings
        if self._in_string:
            pos = _STRING_REST.match(data).end() + 1
            if pos >= len(data):
                return data
        out, copied = [], 0
        for hint in _BIG_NUMBER_HINT.finditer(data, pos):
            start = hint.start(1)
            if start < pos:
                continue
            outside = _OUTSIDE.match(data, pos, start)
            if outside.end() != start:  # in a string: go on after it
                string = _STRINGS.match(data, outside.end())
                if string is None:
                    break  # the string runs on into the next chunk
                pos = string.end()
                continue
            number = _NUMBER.match(data, start)
            if number is None:
                pos = start + 1
                continue
            if not _parser_holds(number.group()):
                out += [data[copied:start], b'"', number.group(), b'"']
                copied = number.end()
                self.quoted_numbers += 1
            pos = number.end()
        if not out:
            return data
        out.append(data[copied:])
        return b"".join(out)

    def _surrogate(self, match: re.Match[bytes]) -> bytes:
        text = match.group()
        if text == b"\\\\" or len(text) == 12:
            return text
        self.escaped_surrogates += 1
        return b"\\" + text

    def _guard_depth(self, data: bytes) -> None:
        pos = 0
        if self._in_string:
            pos = _STRING_REST.match(data).end()
            if pos >= len(data):
                return
            pos += 1  # the closing quote
            self._in_string = False
        rest = _STRINGS.sub(b"", data[pos:])
        quote = rest.find(b'"')
        if quote >= 0:
            self._in_string = True
            rest = rest[:quote]
        for b in rest.translate(None, _NOT_BRACKETS):
            self._depth += 1 if b in (0x5B, 0x7B) else -1
            if self._depth > MAX_DEPTH:
                raise ExportFormatError(f"{self._path}: JSON nested deeper than {MAX_DEPTH} levels; not a span export")


def _first_char(path: Path) -> str:
    with path.open("rb") as f:
        while chunk := f.read(4096):
            stripped = chunk.lstrip()
            if stripped:
                return chr(stripped[0])
    raise ExportFormatError(f"{path}: the file is empty")


ROWS, SESSIONS, OTLP = "rows", "sessions", "otlp"
_NEITHER = (
    "not a span export: expected the ClickHouse exporter layout (a JSON list of span rows, or an object "
    "of session id -> rows) or OTLP JSON (objects holding resourceSpans, one per line or one in all)"
)


def _first_key(path: Path, first: str) -> str | None:
    """The first key of the file's first object (of its first item, for a list);
    None when there is none or the start does not parse (reading then reports it)."""
    wanted = ("start_map", "map_key") if first == "{" else ("start_array", "start_map", "map_key")
    with path.open("rb") as f:
        events = ijson.basic_parse(f, multiple_values=True)
        try:
            for expected, (event, value) in zip(wanted, events):
                if event != expected:
                    return None
                if event == "map_key":
                    return value
        except (ijson.JSONError, UnicodeDecodeError, ValueError):
            return None
    return None


def detect_layout(path: Path) -> str:
    """ROWS, SESSIONS or OTLP, from the file's first characters and first key."""
    first = _first_char(path)
    if first not in "[{":
        raise ExportFormatError(f"{path}: {_NEITHER}")
    if _first_key(path, first) in otlp.DOCUMENT_KEYS:
        return OTLP
    return ROWS if first == "[" else SESSIONS


def _json_error(path: Path, exc: Exception, rows: int) -> ExportFormatError:
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ExportFormatError(f"{path}: invalid JSON after {rows} row(s): {first_line}")


def _otlp_rows(path: Path, f: _CarriableBytes) -> Iterator[RawRow]:
    for item in otlp.iter_spans(f.read):
        if item.problem is not None:
            yield RawRow(path, item.index, None, problem=item.problem, problem_span_id=item.span_id)
        else:
            yield RawRow(path, item.index, item.row)


def iter_rows(path: Path, stats: dict[str, int] | None = None) -> Iterator[RawRow]:
    """The rows of one file, in order. Raises ExportFormatError where the file
    stops being a span export (rows already yielded stay yielded: the caller
    decides what a broken file keeps). `stats` receives the repairs made."""
    layout = detect_layout(path)
    index = 0
    with path.open("rb") as raw:
        f = _CarriableBytes(raw, path)
        try:
            if layout == OTLP:
                for row in _otlp_rows(path, f):
                    yield row
                    index += 1
            elif layout == ROWS:
                for row in ijson.items(f, "item", use_float=True):
                    yield RawRow(path, index, row)
                    index += 1
            else:
                for session_id, rows in ijson.kvitems(f, "", use_float=True):
                    if not isinstance(rows, list):
                        rows = [rows]
                    for row in rows:
                        yield RawRow(path, index, row, session_hint=session_id)
                        index += 1
        except (ijson.JSONError, UnicodeDecodeError) as exc:
            raise _json_error(path, exc, index) from None
        finally:
            if stats is not None:
                stats["escaped_bytes"] = f.escaped_bytes
                stats["escaped_surrogates"] = f.escaped_surrogates
                stats["quoted_numbers"] = f.quoted_numbers
