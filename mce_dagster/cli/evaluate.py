"""`mce ingest` and `mce compute`: traces into the graph, metrics over them."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.markup import escape

from .. import service
from . import _output
from ._output import Commands, err, out, progress

if TYPE_CHECKING:
    from ..runner import ComputeOutcome

commands = Commands()


@commands.command()
def ingest(
    paths: Annotated[
        list[Path],
        typer.Argument(help="OpenTelemetry span files: ClickHouse exporter JSON or OTLP JSON (one document, or one per line)."),
    ],
    batch_size: Annotated[int, typer.Option(help="Sessions per write batch.")] = 200,
    strict: Annotated[bool, typer.Option(help="Exit 1 if any row could not be placed.")] = False,
    replace: Annotated[
        bool,
        typer.Option(help="Delete the sessions already in the graph that these files have rows of (with their metric results) and build them anew from these rows."),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was ingested as JSON (rows not placed included).")] = False,
) -> None:
    """Read span exports into the knowledge graph.

    Two layouts are read, told apart by content: the ClickHouse OpenTelemetry
    exporter's (a JSON list of span rows, or an object of session id -> rows) and
    OTLP JSON (resourceSpans / scopeSpans / spans, as the Collector's file exporter
    or an OTLP/HTTP JSON body holds them). Every span that cannot be placed is
    reported with the reason.

    New rows of a session already in the graph are merged into it (a session may
    arrive in pieces); identical rows change nothing; another version of a stored
    span is reported and not taken (use --replace to rebuild the session from these
    files). Exit 1 when no session was ingested or a file could not be read (with
    --strict, also when a row was not placed)."""
    started = time.perf_counter()
    # The number of sessions is known only once the files are read: the bar counts up.
    with progress("ingesting sessions", None) as advance:
        report = service.ingest(paths, batch_size=batch_size, replace=replace, on_sessions=advance)
    elapsed = time.perf_counter() - started
    if as_json:
        print(json.dumps(_ingest_json(report, elapsed), indent=1))
        if report.ingested == 0 or report.file_errors or (strict and report.problem_count):
            raise typer.Exit(1)
        return
    for problem in report.problems[:100]:
        err.print(f"[yellow]row not placed:[/yellow] {escape(str(problem))}", highlight=False)
    if report.problem_count > 100:
        err.print(f"[yellow]... and {report.problem_count - 100} more rows not placed[/yellow]")
    for notice in report.notices[:20]:
        err.print(f"[cyan]row placed with a caveat:[/cyan] {escape(str(notice))}", highlight=False)
    if report.notice_count > 20:
        err.print(f"[cyan]... and {report.notice_count - 20} more rows placed with a caveat[/cyan]")
    for notice in report.file_notices:
        err.print(f"[cyan]file read with repairs:[/cyan] {escape(notice)}", highlight=False)
    for error in report.file_errors:
        err.print(f"[red]file error:[/red] {escape(error)}", highlight=False)
    unchanged = f"; {len(report.unchanged)} already stored unchanged" if report.unchanged else ""
    if report.merged:
        unchanged += f"; {len(report.merged)} stored session(s) grown by new rows"
    if report.replaced:
        unchanged += f"; {len(report.replaced)} stored session(s) deleted and built anew"
    out.print(
        f"ingested {len(report.sessions)} sessions ({report.spans} spans) from {report.files} file(s) "
        f"in {elapsed:.2f} s{unchanged}; {report.problem_count} row(s) not placed"
    )
    if report.ingested == 0:
        err.print(f"[red]nothing ingested:[/red] {escape(report.nothing_ingested_reason())}", highlight=False)
        raise typer.Exit(1)
    if report.file_errors or (strict and report.problem_count):
        raise typer.Exit(1)


def _ingest_json(report, elapsed: float) -> dict:
    return {
        "sessions": report.sessions,
        "spans": report.spans,
        "files": report.files,
        "unchanged": report.unchanged,
        "merged": report.merged,
        "replaced": report.replaced,
        "rows_not_placed": report.problem_count,
        "not_placed": [str(p) for p in report.problems],
        "rows_placed_with_caveat": report.notice_count,
        "file_errors": report.file_errors,
        "file_notices": report.file_notices,
        "nothing_ingested": report.nothing_ingested_reason() if report.ingested == 0 else None,
        "seconds": round(elapsed, 3),
    }


@commands.command()
def compute(
    session_ids: Annotated[Optional[list[str]], typer.Argument(help="Session ids.")] = None,
    all_sessions: Annotated[bool, typer.Option("--all", help="Every session in the graph.")] = False,
    metrics: Annotated[Optional[str], typer.Option(help="Comma-separated metrics (e.g. Duration,Session/Cost).")] = None,
    budget: Annotated[
        Optional[float],
        typer.Option(help="Ceiling on judge spend in USD; past it, the remaining judge calls are not made and those entities fail."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the outcome as JSON (runs, failures, judge spend).")] = False,
    workers: Annotated[
        Optional[int],
        typer.Option(min=1, help="Runs at once, each in a process of its own (default: engine.workers in mce_config.yaml, 1)."),
    ] = None,
) -> None:
    """Evaluate metrics on sessions through the Dagster definitions.

    One Dagster run per batch of sessions (engine.batch_size in mce_config.yaml);
    the results are written to the graph. Exit 1 when a run failed or a metric
    failed on some entities (they are named; every other result is kept), 2 on
    bad input such as an unknown metric or session."""
    selected = service.parse_metric_list(metrics)
    ids = service.sessions_to_evaluate(session_ids or [], all_sessions)
    if all_sessions and (orphans := service.calls_without_session()):
        from ..graph import describe_orphans

        err.print(f"[yellow]{escape(describe_orphans(orphans))}[/yellow]", highlight=False)
    outcome, elapsed = evaluate(ids, selected, budget, as_json=as_json, workers=workers)
    if as_json:
        print(json.dumps(_compute_json(outcome, elapsed), indent=1))
        if not outcome.success or outcome.failed_entities:
            raise typer.Exit(1)
        return
    out.print(f"evaluated {outcome.sessions} session(s) in {len(outcome.runs)} Dagster run(s), {elapsed:.1f} s")
    report_failures(outcome)
    if outcome.failed_entities:
        raise typer.Exit(1)


def _compute_json(outcome: "ComputeOutcome", elapsed: float) -> dict:
    return {
        "sessions": outcome.sessions,
        "runs": outcome.runs,
        "failed_runs": outcome.failed_runs,
        "failed_entities": outcome.failed_entities,
        "skipped_judged": outcome.skipped_judged,
        "skip_reason": outcome.skip_reason,
        "judge_calls": outcome.judge_calls,
        "judge_cost_usd": outcome.judge_cost,
        "seconds": round(elapsed, 3),
    }


def evaluate(
    ids: list[str], metrics: list[str] | None = None, budget: float | None = None, as_json: bool = False, workers: int | None = None
) -> tuple["ComputeOutcome", float]:
    started = time.perf_counter()
    with progress("evaluating sessions", len(ids)) as advance:
        # -vv shows Dagster's own run log (every event) on stderr.
        outcome = service.compute(ids, metrics, budget, on_run=advance, quiet=_output.verbosity < 2, workers=workers)
    elapsed = time.perf_counter() - started
    if outcome.skipped_judged:
        err.print(f"[yellow]judged metrics skipped ({len(outcome.skipped_judged)}):[/yellow] {escape(outcome.skip_reason or '')}", highlight=False)
    if outcome.judge_calls and not as_json:
        out.print(f"judge: {outcome.judge_calls} call(s), ${outcome.judge_cost:.6f}")
    return outcome, elapsed


def report_failures(outcome: "ComputeOutcome") -> None:
    """Name the metrics that failed on some entities; exit 1 when a run failed."""
    failed = outcome.failed_entities
    if not outcome.success:
        _report_failed_entities(failed)
        err.print(f"[red]failed runs:[/red] {', '.join(outcome.failed_runs)} (see `dagster dev` for the logs)")
        raise typer.Exit(1)
    _report_failed_entities(failed)


def _report_failed_entities(failed: dict[str, int]) -> None:
    if not failed:
        return
    listed = ", ".join(f"{name} on {n}" for name, n in sorted(failed.items()))
    err.print(
        f"[red]metrics failed:[/red] {listed} entit{'y' if sum(failed.values()) == 1 else 'ies'}; "
        "nothing is stored for those, the other results are (the run's logs and the asset's "
        "`failures` metadata in `dagster dev` say why)"
    )
