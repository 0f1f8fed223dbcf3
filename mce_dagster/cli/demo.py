"""`mce synth` and `mce demo`: synthetic sessions, and the whole loop over them."""

from __future__ import annotations

import os
import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .. import service
from ..settings import Settings
from ._output import Commands, fmt, out
from .evaluate import evaluate, report_failures

commands = Commands()


@commands.command()
def synth(
    path: Path,
    sessions: Annotated[int, typer.Option(min=0, help="Number of sessions.")] = 100,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was written as JSON.")] = False,
) -> None:
    """Write synthetic multi-agent sessions as an OpenTelemetry span export.

    Seeded: the same seed writes the same file, byte for byte."""
    from ..synthetic import write_export

    summary = write_export(path, sessions, seed)
    if as_json:
        print(json.dumps({"path": str(summary.path), "sessions": summary.sessions, "spans": summary.spans}))
        return
    out.print(f"wrote {summary.sessions} sessions ({summary.spans} spans) to {summary.path}")


@commands.command()
def demo(
    sessions: Annotated[int, typer.Option(help="Synthetic sessions to generate.")] = 200,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 7,
) -> None:
    """Generate, ingest and evaluate synthetic sessions, and summarise the results.

    Every enabled metric is evaluated through Dagster on the embedded graph and the
    local instance under MCE_HOME; no server, key or network is needed."""
    from ..results import summarize, top_sessions
    from ..synthetic import write_export

    # The demo runs offline: it prices with the table shipped in the package unless the
    # user asked for refreshes explicitly.
    os.environ.setdefault("MODEL_PRICES_REFRESH", "false")
    settings = Settings.from_env()
    export = settings.mce_home / "demo" / f"synthetic-{sessions}-seed{seed}.json"
    export.parent.mkdir(parents=True, exist_ok=True)
    summary = write_export(export, sessions, seed)
    out.print(f"1. generated {summary.sessions} synthetic sessions ({summary.spans} spans) -> {export}")

    started = time.perf_counter()
    report = service.ingest([export])
    elapsed = time.perf_counter() - started
    out.print(
        f"2. ingested {len(report.sessions)} sessions into the embedded FalkorDB at {settings.mce_home} in {elapsed:.1f} s "
        f"({len(report.sessions) / max(elapsed, 1e-9):,.0f} sessions/s); {len(report.problems)} row(s) not placed"
    )

    outcome, elapsed = evaluate(report.sessions)
    out.print(f"3. evaluated them in {len(outcome.runs)} Dagster run(s) in {elapsed:.1f} s")
    report_failures(outcome)

    results = service.session_results(report.sessions)
    table = Table("scope", "metric", "entities", "mean", "min", "max", "sum/sum", title=f"{len(results):,} results")
    for s in summarize(results):
        table.add_row(s.scope, s.metric, f"{s.evaluated:,}", fmt(s.mean), fmt(s.minimum), fmt(s.maximum), fmt(s.pooled))
    out.print(table)
    for title, metric in (("most tool errors", "SumToolError"), ("most cycles", "CyclesCount")):
        top = top_sessions(results, metric)
        if top:
            out.print(f"{title}:")
            for sid, v in top:
                out.print(f"  {int(v):>3}  {sid}")
    out.print(
        "\nSee the same runs, assets and lineage in the Dagster UI:\n"
        f"  DAGSTER_HOME={settings.dagster_home} MCE_HOME={settings.mce_home} .venv/bin/dagster dev -w workspace.yaml\n"
        f"One session's results: .venv/bin/mce kg metric get {report.sessions[0]} --recursive\n"
        "Distributions and roll-ups per app and agent, as one HTML page: .venv/bin/mce report"
    )
