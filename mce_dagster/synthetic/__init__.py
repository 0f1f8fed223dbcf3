"""Seeded generator of realistic multi-agent sessions, as OpenTelemetry span rows.

The rows use the column layout of the ClickHouse OTel exporter, as recorded from
LangGraph applications instrumented with the `ioa_observe` SDK (see the files in
`../shared/data/real-traces/`), so they go through the normal ingestion unchanged.
`tables` holds the apps, agents, tools and models; `builder` turns one app into one
session's rows. Everything is drawn from one `random.Random`, so the same seed
always gives the same rows, byte for byte once written (`mce synth OUT.json
--sessions 1000 --seed 0`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .builder import SessionRows
from .tables import APPS


@dataclass(frozen=True)
class SyntheticSummary:
    sessions: int
    spans: int
    path: Path


def generate_session_rows(rng: random.Random) -> list[dict[str, Any]]:
    """The span rows of one session, in export order (each span after its children)."""
    return SessionRows(rng, rng.choice(APPS)).run()


def generate_rows(n_sessions: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    """The rows of `n_sessions` sessions, session after session, generated lazily."""
    rng = random.Random(seed)
    for _ in range(n_sessions):
        yield from generate_session_rows(rng)


def write_export(path: str | Path, n_sessions: int, seed: int = 0) -> SyntheticSummary:
    """Writes the rows as one JSON list, a row at a time, so memory stays flat."""
    path = Path(path)
    spans = 0
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        out.write("[")
        for row in generate_rows(n_sessions, seed):
            if spans:
                out.write(",\n")
            out.write(json.dumps(row, separators=(",", ":")))
            spans += 1
        out.write("]\n")
    return SyntheticSummary(sessions=n_sessions, spans=spans, path=path)


__all__ = ["SyntheticSummary", "generate_rows", "generate_session_rows", "write_export"]
