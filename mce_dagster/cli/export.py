"""`mce export`: stored results into a Parquet or CSV file."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import service
from ._output import Commands, err, out, progress

commands = Commands()


class TableFormat(StrEnum):
    PARQUET = "parquet"
    CSV = "csv"


@commands.command("export")
def export(
    output: Annotated[Path, typer.Option("--output", "-o", help="The file to write (replaced once complete).")],
    table_format: Annotated[TableFormat, typer.Option("--format", "-f", help="parquet or csv.")] = TableFormat.PARQUET,
    metric: Annotated[
        Optional[list[str]],
        typer.Option(help="Only these metrics, repeated or comma-separated, named as in the catalog: Name, provider.Name or Scope/Name."),
    ] = None,
    scope: Annotated[Optional[list[str]], typer.Option(help="Only results at these scopes (Session, LLMCall, ...), repeated or comma-separated.")] = None,
    session: Annotated[Optional[list[str]], typer.Option(help="Only these sessions, repeated or comma-separated; each must be in the graph.")] = None,
    app: Annotated[Optional[str], typer.Option(help="Only sessions of this app.")] = None,
    since: Annotated[Optional[str], typer.Option(help="Only sessions that started at or after this ISO 8601 date or time (UTC unless it says otherwise).")] = None,
    until: Annotated[Optional[str], typer.Option(help="Only sessions that started before this ISO 8601 date or time.")] = None,
    batch_rows: Annotated[int, typer.Option(help="Results read per query and held in memory at once (whole sessions).", min=1)] = service.EXPORT_BATCH_ROWS,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was written as JSON.")] = False,
) -> None:
    """Write stored metric results to one file, one row per result.

    Every scope is written unless --scope or --metric narrows it. The columns are the keys of `mce kg metric get --recursive --json`, with the
    same values: metric, provider, scope, entity_id, session_id, value, numerator,
    denominator, reasoning, method, evaluation_model, evaluation_prompt_tokens,
    evaluation_completion_tokens, evaluation_total_tokens, evaluation_cost,
    metric_version, computed_at (Unix seconds), metadata, run_id, id. metadata is
    the JSON text of the object shown there. --since and --until filter on the
    session's start time. Exit 0 when results were written; 1 when none matches
    the filters (a file with the columns and no row is written); 2 on bad input,
    such as an unknown metric or session.
    """
    selection = service.select_results(metric, scope, session, app, since, until)
    with progress("exporting sessions", len(selection.sessions)) as advance:
        report = service.export_results(selection, output, table_format.value, batch_rows, on_batch=advance)
    if as_json:
        print(json.dumps({"path": str(report.path), "format": report.format, "rows": report.rows, "sessions": report.sessions}))
    if report.rows == 0:
        err.print(f"[yellow]no results match the filters:[/yellow] wrote {report.path} with the columns and no row")
        raise typer.Exit(1)
    if not as_json:
        out.print(f"exported {report.rows} results of {report.sessions} session(s) to {report.path} ({report.format})")

