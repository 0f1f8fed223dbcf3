"""Ingestion in memory, for small inputs (tests, benchmarks): every span of the
files parsed at once and each session mapped, nothing written."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from pydantic import ValidationError

from ..core.session_graph import SessionGraph
from .mapping import build_session_graph
from .reader import ExportFormatError, iter_rows
from .report import IngestReport, RowProblem
from .spans import ParsedSpan, RowError, parse_row


def collect_spans(paths: Iterable[Path], report: IngestReport) -> dict[str, list[ParsedSpan]]:
    """Every parsed span of the files, by session, in memory. A file that breaks
    off contributes nothing."""
    by_session: dict[str, list[ParsedSpan]] = defaultdict(list)
    for path in paths:
        report.files += 1
        found: list[ParsedSpan] = []
        problems: list[RowProblem] = []
        try:
            for raw in iter_rows(Path(path)):
                report.rows += 1
                if raw.problem is not None:
                    problems.append(RowProblem(str(raw.path), raw.index, raw.problem, raw.span_id))
                    continue
                try:
                    found.append(parse_row(raw.row, raw.session_hint))
                except RowError as exc:
                    problems.append(RowProblem(str(raw.path), raw.index, str(exc), raw.span_id))
        except (ExportFormatError, OSError) as exc:
            report.file_errors.append(f"{exc}; nothing of this file is ingested")
            continue
        report.problems.extend(problems)
        for span in found:
            by_session[span.session_id].append(span)
    report.problem_count = len(report.problems)
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
