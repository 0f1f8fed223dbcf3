"""Ingestion: OpenTelemetry span exports -> the knowledge graph.

Rows are streamed from the files, parsed one by one (a row that cannot be placed
is reported with its reason, never dropped silently), grouped by session and
written in batches. A session's rows may be spread over several files of one
ingest call. Ingesting the same files again leaves the same graph.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from .mapping import SessionGraph, build_session_graph
from .reader import ExportFormatError, iter_rows
from .spans import ParsedSpan, RowError, parse_row

if TYPE_CHECKING:
    from ..graph.store import KnowledgeGraph


@dataclass(frozen=True)
class RowProblem:
    path: str
    index: int
    reason: str
    span_id: str | None = None

    def __str__(self) -> str:
        span = f" (span {self.span_id})" if self.span_id else ""
        return f"{self.path} row {self.index}{span}: {self.reason}"


@dataclass
class IngestReport:
    files: int = 0
    rows: int = 0
    sessions: list[str] = field(default_factory=list)
    problems: list[RowProblem] = field(default_factory=list)
    file_errors: list[str] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)

    @property
    def spans(self) -> int:
        return self.rows - len(self.problems)


def collect_spans(paths: Iterable[Path], report: IngestReport) -> dict[str, list[ParsedSpan]]:
    by_session: dict[str, list[ParsedSpan]] = defaultdict(list)
    for path in paths:
        report.files += 1
        try:
            for raw in iter_rows(Path(path)):
                report.rows += 1
                span_id = raw.row.get("SpanId") if isinstance(raw.row, dict) else None
                try:
                    span = parse_row(raw.row, raw.session_hint)
                except RowError as exc:
                    report.problems.append(RowProblem(str(raw.path), raw.index, str(exc), span_id))
                    continue
                by_session[span.session_id].append(span)
        except (ExportFormatError, OSError) as exc:
            report.file_errors.append(str(exc))
    return by_session


def build_graphs(by_session: dict[str, list[ParsedSpan]], report: IngestReport) -> list[SessionGraph]:
    graphs = []
    for session_id in sorted(by_session):
        try:
            graph = build_session_graph(session_id, by_session[session_id])
        except (ValidationError, ValueError) as exc:
            report.problems.append(RowProblem("(session)", -1, f"session {session_id!r} cannot be mapped: {exc}"))
            continue
        report.counts.update(graph.counts)
        graphs.append(graph)
    return graphs


def ingest_paths(paths: Sequence[Path | str], kg: "KnowledgeGraph", batch_size: int = 200) -> IngestReport:
    report = IngestReport()
    graphs = build_graphs(collect_spans([Path(p) for p in paths], report), report)
    for i in range(0, len(graphs), batch_size):
        batch = graphs[i : i + batch_size]
        kg.write_sessions(batch)
        report.sessions.extend(g.session_id for g in batch)
    return report


__all__ = ["IngestReport", "RowProblem", "build_graphs", "collect_spans", "ingest_paths"]
