"""Streams span rows out of OpenTelemetry export files.

Two layouts: a JSON list of span rows, or an object mapping a session id to its
rows. Files are read incrementally (ijson), never loaded whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ijson


@dataclass(frozen=True)
class RawRow:
    path: Path
    index: int  # position of the row in its file
    row: Any
    session_hint: str | None = None  # the key, in the object layout


class ExportFormatError(ValueError):
    """A file that is not a span export at all."""


def _first_char(path: Path) -> str:
    with path.open("rb") as f:
        while chunk := f.read(4096):
            stripped = chunk.lstrip()
            if stripped:
                return chr(stripped[0])
    raise ExportFormatError(f"{path}: the file is empty")


def iter_rows(path: Path) -> Iterator[RawRow]:
    first = _first_char(path)
    try:
        with path.open("rb") as f:
            if first == "[":
                for i, row in enumerate(ijson.items(f, "item", use_float=True)):
                    yield RawRow(path, i, row)
            elif first == "{":
                index = 0
                for session_id, rows in ijson.kvitems(f, "", use_float=True):
                    if not isinstance(rows, list):
                        rows = [rows]
                    for row in rows:
                        yield RawRow(path, index, row, session_hint=session_id)
                        index += 1
            else:
                raise ExportFormatError(
                    f"{path}: not a span export (expected a JSON list of rows or an object of session id -> rows)"
                )
    except ijson.JSONError as exc:
        raise ExportFormatError(f"{path}: invalid JSON: {exc}") from None
