"""The report's I/O: results read from the graph in batches of sessions, roll-ups
asked of the registry query (the same answers `mce serve` gives), the pictures
drawn and the HTML file written."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..catalog import Catalog
from ..core.ontology import Scope
from ..errors import InputError
from ..files import write_text_atomically
from ..graph import KnowledgeGraph
from ..results import ResultSelection, to_public
from ..results.query import query_metric
from .html import render
from .model import DistributionBuilder, Report, Rollup, rollup_from_answer

#: where the report goes, under MCE_HOME, unless told otherwise
REPORT_PATH = Path("reports") / "evaluation_report.html"
log = logging.getLogger(__name__)
# Results read per query: whole sessions up to this many results.
BATCH_ROWS = 10_000
# The roll-ups: each cut at the scope whose results it groups.
CUTS = (("app", Scope.SESSION), ("agent", Scope.AGENT_CALL))


def evaluated_sessions(kg: KnowledgeGraph) -> ResultSelection:
    rows = kg.select_sessions(evaluated=True)
    return ResultSelection(sessions=tuple(sorted((r["id"], int(r["results"])) for r in rows)))


def rollups(kg: KnowledgeGraph, catalog: Catalog) -> list[Rollup]:
    """Every metric the catalog allows to be cut per app (its Session results) or per
    agent (its AgentCall results), where results exist."""
    out = []
    for d in sorted(catalog.definitions.values(), key=lambda d: (d.provider, d.name)):
        for cut, scope in CUTS:
            if scope in d.scopes and cut in d.cuts_at(scope):
                answer = query_metric(kg, catalog, str(d.ref), scope.value, by=cut)
                log.debug("%s at %s per %s: %d group(s)", d.ref, scope.value, cut, len(answer["rows"]))
                if answer["rows"]:
                    out.append(rollup_from_answer(answer))
    return out


def collect(
    kg: KnowledgeGraph, catalog: Catalog, batch_rows: int = BATCH_ROWS, on_batch: Callable[[int], None] | None = None
) -> Report:
    """The report's numbers over every evaluated session. `on_batch(n)` is told how
    many sessions each batch read (a progress bar)."""
    versions = {(d.provider, d.name): d.version for d in catalog.definitions.values()}
    units = {(d.provider, d.name): d.unit for d in catalog.definitions.values()}
    builder = DistributionBuilder(versions, units)
    started = time.perf_counter()
    for ids in evaluated_sessions(kg).batches(batch_rows):
        builder.add(to_public(p) for p in kg.select_results(ids))
        if on_batch:
            on_batch(len(ids))
    log.info("read %d results of %d sessions in %.1f s", builder.results, len(builder.sessions), time.perf_counter() - started)
    return Report(
        sessions=len(builder.sessions),
        results=builder.results,
        other_versions=builder.other_versions,
        distributions=tuple(builder.distributions()),
        rollups=tuple(rollups(kg, catalog)),
        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
    )


@dataclass(frozen=True)
class Pictures:
    histograms: dict[str, bytes]  # metric key -> PNG
    rollups: dict[str, bytes]  # cut -> PNG


def draw(report: Report) -> Pictures:
    from .draw import histogram_png, rollups_png

    return Pictures(
        {d.key: histogram_png(d) for d in report.distributions},
        {cut: rollups_png(report.rollups_by(cut), cut) for cut, _ in CUTS if report.rollups_by(cut)},
    )


def write_html(report: Report, pictures: Pictures, path: Path) -> Path:
    """The standalone HTML file, replaced whole once written."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"cannot write the report to {path}: it is a directory (give a file name, as in {path / REPORT_PATH.name})")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(path, render(report, pictures.histograms, pictures.rollups))
    except OSError as exc:
        raise InputError(f"cannot write the report to {path}: {exc}") from None
    return path
