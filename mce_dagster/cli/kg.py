"""`mce kg`: the knowledge graph, and the results stored in it."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from .. import service
from ..errors import UnknownSessionError, shown
from ._output import Commands, err, fmt, out

kg_app = Commands(help="The knowledge graph.", no_args_is_help=True)
kg_metric_app = Commands(help="Metric results stored in the graph.", no_args_is_help=True)
kg_app.add_typer(kg_metric_app, name="metric")


@kg_metric_app.command("get")
def kg_metric_get(
    session_id: str,
    recursive: Annotated[bool, typer.Option(help="Include results on the session's calls.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Read a session's metric results back from the graph."""
    try:
        rows = service.results(session_id, recursive=recursive)
    except UnknownSessionError:
        # An error in every output form: `--json` prints nothing rather than `[]`.
        shown_id = escape(shown(session_id, quoted=False))
        err.print(
            f"[red]error:[/red] session {shown_id} is not in the knowledge graph: ingest it first "
            f"(mce ingest FILE), then evaluate it (mce compute {shown_id})",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(1) from None
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return
    if not rows:
        err.print(f"[yellow]no results stored for session {session_id}[/yellow]: evaluate it first (mce compute {session_id})")
        raise typer.Exit(1)
    table = Table("scope", "entity", "metric", "value", "num/den", "note")
    for r in rows:
        ratio = f"{fmt(r['numerator'])}/{fmt(r['denominator'])}" if r["denominator"] is not None else ""
        table.add_row(r["scope"], r["entity_id"][-16:], r["metric"], fmt(r["value"]), ratio, (r["reasoning"] or "")[:60])
    out.print(table)


@kg_app.command("status")
def kg_status(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Where the graph is and what it holds."""
    status = service.graph_status()
    if as_json:
        print(json.dumps({
            "where": status.where, "sessions": status.sessions, "results": status.results,
            "calls_without_session": status.calls_without_session, "sessions_without_node": sorted(status.orphans),
        }, indent=1))
        return
    out.print(status.where)
    out.print(f"sessions: {status.sessions}   metric results: {status.results}")
    out.print(f"calls without a session: {status.calls_without_session}")
    for sid, by_label in sorted(status.orphans.items())[:10]:
        calls = ", ".join(f"{n} {label}" for label, n in sorted(by_label.items()))
        out.print(f"  {sid}: {calls} (no Session node: not evaluated)", highlight=False)


@kg_app.command("stop")
def kg_stop(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Stop the embedded graph server (its data stays under MCE_HOME)."""
    stopped = service.stop_graph()
    if as_json:
        print(json.dumps({"stopped": stopped}))
        return
    out.print("stopped" if stopped else "not running")


@kg_app.command("check")
def kg_check(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Resolve every graph property the catalog's metrics read against the live graph.

    Exit 1 when a property a metric needs is on no node of its label, and when the
    graph holds no node of any label the catalog reads (there is nothing to check:
    ingest sessions first)."""
    report = service.check_graph()
    if as_json:
        fields = ("metrics", "checked", "missing", "unset", "empty_labels", "empty")
        print(json.dumps({"ok": report.ok, **{f: getattr(report, f) for f in fields}}, indent=1))
        if not report.ok:
            raise typer.Exit(1)
        return
    if report.empty:
        where = service.graph_status().where
        err.print(
            f"[red]nothing to check:[/red] {escape(where)} holds no node of the labels the metrics read "
            f"({', '.join(report.labels)}); ingest sessions first (mce ingest FILE)",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(1)
    if report.empty_labels:
        out.print(f"[yellow]no nodes yet to check:[/yellow] {', '.join(report.empty_labels)}")
    for u in report.unset:
        out.print(f"[yellow]optional, set on no node sampled:[/yellow] {u}")
    for m in report.missing:
        err.print(f"[red]not in the graph:[/red] {m}")
    if not report.ok:
        raise typer.Exit(1)
    out.print(f"OK {report.metrics} metrics resolve against the graph ({report.checked} property references checked)")
