"""`mce report`: the evaluation report as one standalone HTML file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from .. import service
from ._output import Commands, err, fmt, out, progress

commands = Commands()


@commands.command("report")
def report(
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="The HTML file to write (default: $MCE_HOME/reports/evaluation_report.html).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report's numbers as JSON.")] = False,
) -> None:
    """Write the evaluation report over every evaluated session, as one HTML file.

    Each metric's distribution, and roll-ups per app and per agent (ratios as sum
    over sum), with the images inline (open it offline, mail it). The same file the
    Dagster asset `evaluation_report` writes. Exit 1 when no session is evaluated."""
    with progress("reading sessions", None) as advance:
        path, numbers = service.write_report(output, on_batch=advance)
    if as_json:
        print(json.dumps({"path": str(path), **numbers.as_json()}, indent=1))
    else:
        table = Table("metric", "results", "mean", "min", "max", "sum/sum", title=f"{numbers.sessions:,} evaluated sessions")
        for d in numbers.distributions:
            s = d.summary
            table.add_row(d.key, f"{s.count:,}", fmt(s.mean), fmt(s.minimum), fmt(s.maximum), fmt(s.pooled))
        if numbers.distributions:
            out.print(table)
        cuts = ", ".join(f"{len(numbers.rollups_by(c))} metrics per {c}" for c in ("app", "agent"))
        out.print(f"wrote {path} ({len(numbers.distributions)} distributions; {cuts})")
    if numbers.sessions == 0:
        err.print("[yellow]no evaluated session:[/yellow] the report is empty; run `mce compute --all` first")
        raise typer.Exit(1)
