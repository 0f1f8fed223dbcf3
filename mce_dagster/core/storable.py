"""Text a graph can store.

FalkorDB's query parser stops at a NUL, and an unpaired surrogate has no UTF-8
form, so neither may reach a graph: ingestion keeps them as `\\uXXXX` escapes
(and says so per row), and the graph backends escape them in every parameter, so
a lookup by such a value finds nothing instead of failing the query, and a judge's
reply holding one is stored escaped instead of failing its batch.
"""

from __future__ import annotations

import json
import re
from typing import Any

UNCARRIABLE = re.compile("[\x00\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def has_uncarriable(text: str) -> bool:
    return UNCARRIABLE.search(text) is not None


def escaped(value: Any, count: list[int] | None = None) -> Any:
    """`value` (strings, and dicts and lists of them, at any depth) with every
    character a graph cannot store written as a `\\uXXXX` escape; `count[0]` is
    raised by how many were. What needs nothing is returned as it is, not copied:
    the backends pass every write batch through here."""
    if _carriable_as_is(value):
        return value
    return _escaped(value, count)


def _carriable_as_is(value: Any) -> bool:
    """Whether `value` holds nothing to escape, in one pass of the C JSON encoder
    instead of a Python call per string (a write batch holds hundreds of thousands).
    A NUL comes out as `\\u0000`; a lone surrogate comes out as itself. Anything
    the encoder cannot take, or a doubt, is left to the exact walk."""
    try:
        text = json.dumps(value, ensure_ascii=False, check_circular=False)
    except (TypeError, ValueError, RecursionError):
        return False
    if "\\u0000" in text:
        return False
    return text.isascii() or UNCARRIABLE.search(text) is None


def _escaped(value: Any, count: list[int] | None) -> Any:
    if isinstance(value, str):
        if value.isascii() and "\x00" not in value:
            return value
        text, n = UNCARRIABLE.subn(_escape, value)
        if not n:
            return value
        if count is not None:
            count[0] += n
        return text
    if isinstance(value, dict):
        out: dict | None = None
        for i, (k, v) in enumerate(value.items()):
            new_k, new_v = _escaped(k, count), _escaped(v, count)
            if out is None and (new_k is not k or new_v is not v):
                out = dict(list(value.items())[:i])
            if out is not None:
                out[new_k] = new_v
        return value if out is None else out
    if isinstance(value, (list, tuple)):
        items: list | None = None
        for i, v in enumerate(value):
            new_v = _escaped(v, count)
            if items is None and new_v is not v:
                items = list(value[:i])
            if items is not None:
                items.append(new_v)
        return value if items is None else items
    return value
