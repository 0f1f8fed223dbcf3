"""Ingestion through an on-disk stage: OpenTelemetry span exports (the ClickHouse exporter's layout, or
OTLP JSON converted to it: see `reader`) -> the knowledge graph.

Rows are streamed from the files into an on-disk stage (see `stage`), then
sessions are built and written a batch at a time, so memory holds one batch, not
a file. The rules, each reported per row with its reason (nothing is dropped
silently, and one bad row never fails another):

- a row that cannot be parsed (no session id, SpanId or TraceId, a bad
  timestamp, an id holding a character the graph cannot store), or an OTLP span
  that cannot be converted to one, is not placed;
  other text the graph cannot store (NUL, unpaired surrogates) is kept escaped
  as `\\uXXXX`, with a notice;
- a file that breaks off (invalid JSON) contributes nothing: none of its rows,
  and none of the rows other files hold of the sessions it had begun;
- a span id belongs to one session: a row whose SpanId another session already
  holds (in the graph, or in an earlier row of the call) is not placed;
- a session may arrive over several calls: rows of a session already stored are
  merged with it. The stored spans are read back and the whole session is
  mapped anew with the new rows, so the graph is the one a single call with all
  the rows gives, whatever the order (a child placed under the first MASCall
  until its parent arrives is then placed under it). Rows it already holds (same
  content) change nothing; a row whose SpanId it holds with other content is a
  conflict, not placed (the stored span is kept). The session's metric results
  are kept, linked to the calls anew; those of a call the session no longer has
  are removed. With `replace`, the stored sessions the files have rows of are
  deleted (metric results included) and built anew from those rows only;
- the rows of a session that are not placed are counted on its Session
  (`rowsNotPlaced`) over every call that built it, each row once;
- a parent cycle is broken (see `mapping`), with a notice per span on it;
- each session is written all or nothing (see `KnowledgeGraph.write_sessions`);
  a session that fails to write is reported row by row and leaves nothing.

Ingesting the same files again leaves the same graph.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from ..core.session_graph import SessionGraph
from .mapping import build_session_graph, synthetic_mas_id
from .reader import ExportFormatError, iter_rows
from .report import IngestReport, RowProblem
from .spans import ParsedSpan, RowError, parse_row, row_digest, row_text, session_of, span_from_record, span_record
from .stage import Stage, StagedRow

if TYPE_CHECKING:
    from ..graph.store import KnowledgeGraph

log = logging.getLogger(__name__)

# The report lists this many problems and notices; the counts are always whole.
MAX_LISTED = 10_000
# A write batch holds at most this much staged data, whatever its session count.
MAX_BATCH_BYTES = 16 * 2**20


# -- reading files into the stage -------------------------------------------------


def _stage_file(stage: Stage, path: Path, report: IngestReport) -> None:
    file = stage.add_file(path)
    report.files += 1
    rows = 0
    stats: dict[str, int] = {}
    try:
        for raw in iter_rows(path, stats):
            rows += 1
            report.rows += 1
            span_id = raw.span_id
            if raw.problem is not None:
                stage.add_problem(file, raw.index, span_id, raw.problem, session=_session_or_none(raw), digest=_digest_or_none(raw))
                continue
            try:
                text = row_text(raw.row)
                span = parse_row(raw.row, raw.session_hint, text)
            except RowError as exc:
                stage.add_problem(file, raw.index, span_id, str(exc), session=_session_or_none(raw), digest=row_digest(text))
                continue
            except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError) as exc:
                stage.add_problem(
                    file, raw.index, span_id, f"row cannot be read: {type(exc).__name__}: {exc}",
                    session=_session_or_none(raw), digest=_digest_or_none(raw),
                )
                continue
            stage.add_row(file, raw.index, span, row_digest(text))
            if span.escaped:
                stage.add_problem(
                    file, raw.index, span.span_id,
                    f"{span.escaped} character(s) the graph cannot store (NUL, unpaired surrogates) kept as \\uXXXX escapes",
                    placed=True,
                )
    except (ExportFormatError, OSError) as exc:
        sessions = stage.drop_file(file, rows, str(exc))
        report.broken_rows += rows
        shown = ", ".join(sessions[:5]) + (" ..." if len(sessions) > 5 else "")
        message = f"{exc}; nothing of this file is ingested"
        if sessions:
            message += f", nor of the {len(sessions)} session(s) it had begun ({shown}) from other files"
        report.file_errors.append(message)
        return
    stage.file_done(file, rows)
    kept = []
    if stats.get("escaped_bytes"):
        kept.append(f"{stats['escaped_bytes']} byte(s) that are not UTF-8 kept as \\xNN text")
    if stats.get("escaped_surrogates"):
        kept.append(f"{stats['escaped_surrogates']} unpaired surrogate escape(s) (\\uD800-\\uDFFF) kept as text")
    if stats.get("quoted_numbers"):
        kept.append(f"{stats['quoted_numbers']} number(s) too large for the JSON parser read as strings")
    if kept:
        report.file_notices.append(f"{stage.paths[file]}: {'; '.join(kept)}")


def _digest_or_none(raw) -> str | None:
    """The digest of a row that cannot be placed, when it is one JSON can write."""
    if raw.row is None:
        return None
    try:
        return row_digest(row_text(raw.row))
    except (ValueError, TypeError, RecursionError):
        return None


def _session_or_none(raw) -> str | None:
    """The session a row that cannot be placed names, when it names one."""
    if not isinstance(raw.row, dict):
        return raw.session_hint
    try:
        return session_of(raw.row, raw.session_hint)
    except (RowError, TypeError, ValueError, AttributeError):
        return None


# -- one batch of sessions ----------------------------------------------------------


def _session_digest(digests: dict[str, str]) -> str:
    text = "\n".join(f"{k}\t{v}" for k, v in sorted(digests.items()))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class _Batch:
    def __init__(self, stage: Stage, kg: "KnowledgeGraph", report: IngestReport):
        self.stage, self.kg, self.report = stage, kg, report
        # Identical copies of a kept row: they share its fate.
        self.twins: dict[tuple[str, str], list[StagedRow]] = {}

    def problem(self, row: StagedRow, reason: str) -> None:
        for r in (row, *self.twins.get((row.session, row.span_id), ())):
            self.stage.add_problem(r.file, r.index, r.span_id, reason, session=r.session, digest=r.digest)

    def notice(self, row: StagedRow, reason: str) -> None:
        self.stage.add_problem(row.file, row.index, row.span_id, reason, placed=True)

    def placed(self, rows: Iterable[StagedRow]) -> None:
        self.report.placed += sum(1 + len(self.twins.get((r.session, r.span_id), ())) for r in rows)

    def run(self, batch: list[tuple[str, list[StagedRow]]]) -> None:
        self.twins = {}
        winners: dict[str, dict[str, StagedRow]] = {}
        for session_id, rows in batch:
            kept: dict[str, StagedRow] = {}
            for row in rows:
                earlier = kept.get(row.span_id)
                if earlier is not None:
                    copies = self.twins.pop((session_id, row.span_id), [])
                    if earlier.digest == row.digest:
                        self.twins[(session_id, row.span_id)] = [*copies, earlier]
                    else:
                        for r in (earlier, *copies):
                            self.stage.add_problem(
                                r.file, r.index, r.span_id,
                                f"SpanId {row.span_id!r} appears again later in the session "
                                f"(row {row.index} of {self.stage.paths[row.file]}) with other content; the later row is kept",
                                session=r.session, digest=r.digest,
                            )
                kept[row.span_id] = row
            winners[session_id] = kept

        owners = self.kg.span_owners([span for kept in winners.values() for span in kept])
        stored = self.kg.stored_sessions(list(winners))
        stored_nodes = self.kg.stored_spans(list(stored))

        # First every refusal of the batch (span ids other sessions hold, conflicts
        # with stored spans), so that the rows not placed are known before writing.
        plans: list[_Plan] = []
        for session_id, kept in winners.items():
            free: dict[str, StagedRow] = {}
            for span_id, row in kept.items():
                others = sorted(owners.get(span_id, set()) - {session_id})
                if others:
                    self.problem(
                        row,
                        f"SpanId {span_id!r} already belongs to session {others[0]!r} in the knowledge graph: "
                        "a span belongs to one session, so this row is not ingested",
                    )
                else:
                    free[span_id] = row
            if session_id in stored:
                plan = self._against_stored(session_id, free, stored[session_id], stored_nodes.get(session_id, []))
            else:
                plan = _Plan(session_id, spans={i: r.span() for i, r in free.items()}, digests={i: r.digest for i, r in free.items()}, new=list(free.values()))
            if plan is not None:
                plans.append(plan)

        unplaced = self.stage.unplaced_keys([plan.session_id for plan in plans])
        graphs: list[SessionGraph] = []
        plan_of: dict[str, _Plan] = {}
        for plan in plans:
            sid = plan.session_id
            refused = (plan.refused | unplaced.get(sid, set())) - set(plan.digests.values())
            if plan.stored and not plan.new and refused == plan.refused:
                # Nothing to write: its rows are stored as they are, or refused
                # again for the reasons already recorded.
                self.report.unchanged.append(sid)
                continue
            if not plan.spans:
                continue
            graph = self._build(sid, plan.spans, plan.new)
            if graph is None:
                continue
            graph.digests = dict(plan.digests)
            graph.digest = _session_digest(graph.digests)
            graph.refused = refused
            graph.rows_not_placed = len(refused)
            graphs.append(graph)
            plan_of[sid] = plan

        grown = {sid for sid, plan in plan_of.items() if plan.stored}
        failed = self.kg.write_sessions(graphs, grown=grown) if graphs else {}
        for graph in graphs:
            sid = graph.session_id
            new = plan_of[sid].new
            if sid in failed:
                kept_as_is = ", which stays as it was" if sid in grown else ""
                for row in new:
                    self.problem(row, f"session {sid!r} could not be written, so nothing of these rows is stored{kept_as_is}: {failed[sid]}")
                continue
            self.report.sessions.append(sid)
            if new and sid in grown:
                self.report.merged.append(sid)
            self.report.spans += len(new)
            self.placed(new)
            self.report.counts.update(graph.counts)
            by_span = {r.span_id: r for r in new}
            for span_id, note in graph.notes:
                if span_id in by_span:
                    self.notice(by_span[span_id], note)

    def _against_stored(
        self, session_id: str, rows: dict[str, StagedRow], stored: dict, nodes: list[dict]
    ) -> "_Plan | None":
        """Rows of a session the graph already holds, against its stored spans: the
        same rows are placed as they are, rows of span ids it holds with other
        content are refused, the rest are new. None when the session cannot be
        merged (written before span records were kept)."""
        digests = {n["id"]: n["digest"] for n in nodes if n["digest"] is not None}
        same = [r for span_id, r in rows.items() if digests.get(span_id) == r.digest]
        self.placed(same)
        conflicts = [r for span_id, r in rows.items() if span_id in digests and digests[span_id] != r.digest]
        for row in conflicts:
            self.problem(
                row,
                f"session {session_id!r} already holds span {row.span_id!r} from another version of this row "
                "(ingested by an earlier call); the stored span is kept and this row is not ingested: "
                "ingest all of the session's rows with --replace to take this version",
            )
        new = [r for span_id, r in rows.items() if span_id not in digests]
        if any(n["digest"] is not None and n["record"] is None for n in nodes):
            for row in new:
                self.problem(
                    row,
                    f"session {session_id!r} was stored by an older mce ingest that kept no record of its spans, "
                    "so rows cannot be merged into it: ingest all of its rows with --replace to rebuild it",
                )
            if same and not new and not conflicts:
                self.report.unchanged.append(session_id)
            return None
        spans = {
            n["id"]: span_from_record(n["record"], n["props"], n["input"], n["output"]) for n in nodes if n["record"] is not None
        }
        spans.update((r.span_id, r.span()) for r in new)
        digests.update((r.span_id, r.digest) for r in new)
        return _Plan(session_id, spans=spans, digests=digests, new=new, same=same, stored=True, refused=set(stored.get("refused") or ()))

    def _build(self, session_id: str, spans: dict[str, ParsedSpan], rows: list[StagedRow]) -> SessionGraph | None:
        """The session's graph from all its spans; a failure is reported on `rows`,
        the rows of this call."""
        try:
            attempt = 0
            while True:  # the id of a MASCall made for the session must be nobody's span id
                mas_id = synthetic_mas_id(session_id, attempt)
                if mas_id in spans:
                    attempt += 1
                    continue
                graph = build_session_graph(session_id, list(spans.values()), mas_id=mas_id)
                if not graph.counts["synthetic_mas_calls"] or not self._taken(mas_id, session_id) or attempt > 100:
                    break
                attempt += 1
        except (ValidationError, ValueError) as exc:
            for row in rows:
                self.problem(row, f"session {session_id!r} cannot be mapped onto the ontology: {exc}")
            return None
        graph.records = {span_id: span_record(span) for span_id, span in spans.items()}
        return graph

    def _taken(self, node_id: str, session_id: str) -> bool:
        return self.stage.claimed_by_other(node_id, session_id) or bool(
            self.kg.span_owners([node_id]).get(node_id, set()) - {session_id}
        )


@dataclass
class _Plan:
    """What a batch writes of one session: all its spans (stored ones included)
    with their row digests, and the rows of this call that add to it."""

    session_id: str
    spans: dict[str, ParsedSpan]
    digests: dict[str, str]
    new: list[StagedRow]
    same: list[StagedRow] = field(default_factory=list)
    stored: bool = False
    refused: set[str] = field(default_factory=set)  # keys of its rows not placed by earlier calls


# -- the whole call -------------------------------------------------------------------


def ingest_paths(
    paths: Sequence[Path | str],
    kg: "KnowledgeGraph",
    batch_size: int = 200,
    *,
    replace: bool = False,
    max_batch_bytes: int = MAX_BATCH_BYTES,
) -> IngestReport:
    """Ingest span export files. `replace`: sessions already stored that the files
    have rows of are deleted (with their metric results) and built anew from
    those rows, instead of being left as they are."""
    report = IngestReport()
    with tempfile.TemporaryDirectory(prefix="mce-ingest-") as tmp, Stage(Path(tmp)) as stage:
        for path in paths:
            _stage_file(stage, Path(path), report)
        stage.finish()
        if replace:
            # Deleted first, so that the call then builds them as new: their span
            # ids are free again, and running the same call twice gives the same graph.
            for page in stage.session_pages():
                stored = list(kg.stored_sessions(page))
                kg.delete_sessions(stored)
                report.replaced += stored
        batch = _Batch(stage, kg, report)
        for sessions in stage.batches(max(1, batch_size), max_batch_bytes):
            batch.run(sessions)
        report.problem_count = stage.problem_count()
        report.problems = [RowProblem(p, i, r, s) for p, i, s, r in stage.problems(limit=MAX_LISTED)]
        report.notice_count = stage.problem_count(placed=True)
        report.notices = [RowProblem(p, i, r, s) for p, i, s, r in stage.problems(placed=True, limit=MAX_LISTED)]
    return report
