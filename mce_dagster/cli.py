"""`mce`: the commands a person types."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(help="Metrics Computation Engine for multi-agent systems, on Dagster.", no_args_is_help=True)
metric_app = typer.Typer(help="The metric catalog.", no_args_is_help=True)
provider_app = typer.Typer(help="Metric providers.", no_args_is_help=True)
kg_app = typer.Typer(help="The knowledge graph.", no_args_is_help=True)
kg_metric_app = typer.Typer(help="Metric results stored in the graph.", no_args_is_help=True)
app.add_typer(metric_app, name="metric")
app.add_typer(provider_app, name="provider")
app.add_typer(kg_app, name="kg")
kg_app.add_typer(kg_metric_app, name="metric")

# Tables stay readable when the output is a file or a pipe (Rich assumes 80 columns).
out = Console(width=None if sys.stdout.isatty() else 132)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 132)


def _catalog():
    from .catalog import CatalogError, load_catalog

    try:
        return load_catalog()
    except CatalogError as exc:
        err.print(f"[red]metric catalog error:[/red] {exc}")
        raise typer.Exit(2) from None


def _graph():
    from .graph import open_graph

    return open_graph()


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


# -- catalog ---------------------------------------------------------------


@metric_app.command("list")
def metric_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    provider: Annotated[Optional[str], typer.Option(help="Only this provider.")] = None,
) -> None:
    """List the metrics of the catalog."""
    catalog = _catalog()
    defs = sorted(catalog.definitions.values(), key=lambda d: (d.provider, d.name))
    if provider:
        defs = [d for d in defs if d.provider == provider]
    if as_json:
        print(json.dumps([_definition_json(d) for d in defs], indent=2))
        return
    table = Table("metric", "provider", "kind", "scopes", "unit", "version")
    for d in defs:
        table.add_row(d.name, d.provider, d.kind, ", ".join(s.value for s in d.scopes), d.unit, str(d.version))
    out.print(table)


def _definition_json(d) -> dict:
    data = d.model_dump(mode="json", exclude_none=True)
    data["scopes"] = [s.value for s in d.scopes]
    return data


@metric_app.command("show")
def metric_show(name: Annotated[str, typer.Argument(help="Name, or provider.Name.")]) -> None:
    """Show one metric's definition."""
    catalog = _catalog()
    try:
        d = catalog.find(name)
    except KeyError as exc:
        err.print(f"[red]{exc.args[0]}[/red]")
        raise typer.Exit(1) from None
    out.print(f"[bold]{d.name}[/bold] ({d.provider}, {d.kind}, version {d.version})")
    out.print(f"scopes: {', '.join(s.value for s in d.scopes)}")
    out.print(f"unit: {d.unit}   range: {list(d.value_range)}")
    if d.depends_on:
        out.print(f"depends on: {', '.join(d.depends_on)}")
    out.print(d.description.strip())
    if d.caveats:
        out.print(f"[yellow]caveats:[/yellow] {d.caveats.strip()}")
    if d.requires:
        out.print("reads: " + "; ".join(f"{k.value}: {', '.join(v)}" for k, v in d.requires.items()))


@provider_app.command("list")
def provider_list() -> None:
    """List metric providers and how many metrics each defines."""
    catalog = _catalog()
    table = Table("provider", "source", "metrics")
    for provider, source in sorted(catalog.providers.items()):
        count = sum(1 for (p, _) in catalog.definitions if p == provider)
        table.add_row(provider, source, str(count))
    out.print(table)


# -- ingestion and computation ---------------------------------------------


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="OpenTelemetry span export files (JSON).")],
    batch_size: Annotated[int, typer.Option(help="Sessions per write batch.")] = 200,
    strict: Annotated[bool, typer.Option(help="Exit 1 if any row could not be placed.")] = False,
    replace: Annotated[
        bool,
        typer.Option(help="Rebuild sessions already in the graph from the rows of these files (their metric results are deleted)."),
    ] = False,
) -> None:
    """Read span exports into the knowledge graph. Rows of a session already in the
    graph are never merged into it: identical rows change nothing, other rows are
    reported (use --replace to rebuild the session from these files)."""
    from rich.markup import escape

    from .ingest import ingest_paths

    started = time.perf_counter()
    report = ingest_paths(paths, _graph(), batch_size=batch_size, replace=replace)
    elapsed = time.perf_counter() - started
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
    out.print(
        f"ingested {len(report.sessions)} sessions ({report.spans} spans) from {report.files} file(s) "
        f"in {elapsed:.2f} s{unchanged}; {report.problem_count} row(s) not placed"
    )
    if report.ingested == 0:
        err.print(f"[red]nothing ingested:[/red] {escape(report.nothing_ingested_reason())}", highlight=False)
        raise typer.Exit(1)
    if report.file_errors or (strict and report.problem_count):
        raise typer.Exit(1)


@app.command()
def compute(
    session_ids: Annotated[Optional[list[str]], typer.Argument(help="Session ids.")] = None,
    all_sessions: Annotated[bool, typer.Option("--all", help="Every session in the graph.")] = False,
    metrics: Annotated[Optional[str], typer.Option(help="Comma-separated metrics (e.g. Duration,Session/Cost).")] = None,
) -> None:
    """Evaluate metrics on sessions through the Dagster definitions."""
    from .runner import compute_sessions

    if all_sessions == bool(session_ids):
        err.print("[red]give session ids or --all (not both)[/red]")
        raise typer.Exit(2)
    ids = _graph().session_ids() if all_sessions else list(session_ids or [])
    if not ids:
        err.print("[yellow]no session to evaluate[/yellow]")
        raise typer.Exit(1)
    selected = [m.strip() for m in metrics.split(",") if m.strip()] if metrics else None
    started = time.perf_counter()
    try:
        outcome = compute_sessions(ids, selected)
    except (KeyError, ValueError) as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    elapsed = time.perf_counter() - started
    out.print(f"evaluated {outcome.sessions} session(s) in {len(outcome.runs)} Dagster run(s), {elapsed:.1f} s")
    _report_failed_entities(outcome.failed_entities)
    if not outcome.success:
        err.print(f"[red]failed runs:[/red] {', '.join(outcome.failed_runs)} (see `dagster dev` for the logs)")
        raise typer.Exit(1)
    if outcome.failed_entities:
        raise typer.Exit(1)


def _report_failed_entities(failed: dict[str, int]) -> None:
    if not failed:
        return
    listed = ", ".join(f"{name} on {n}" for name, n in sorted(failed.items()))
    err.print(
        f"[red]metrics failed:[/red] {listed} entit{'y' if sum(failed.values()) == 1 else 'ies'}; "
        "nothing is stored for those, the other results are (the run's logs and the asset's "
        "`failures` metadata in `dagster dev` say why)"
    )


@kg_metric_app.command("get")
def kg_metric_get(
    session_id: str,
    recursive: Annotated[bool, typer.Option(help="Include results on the session's calls.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Read a session's metric results back from the graph."""
    from .client import MCEClient

    rows = MCEClient(_graph()).get_metrics(session_id, recursive=recursive)
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return
    if not rows:
        err.print(f"[yellow]no results stored for session {session_id}[/yellow]")
        raise typer.Exit(1)
    table = Table("scope", "entity", "metric", "value", "num/den", "note")
    for r in rows:
        ratio = f"{_fmt(r['numerator'])}/{_fmt(r['denominator'])}" if r["denominator"] is not None else ""
        table.add_row(r["scope"], r["entity_id"][-16:], r["metric"], _fmt(r["value"]), ratio, (r["reasoning"] or "")[:60])
    out.print(table)


@kg_app.command("status")
def kg_status() -> None:
    """Where the graph is and what it holds."""
    from .service import graph_status

    status = graph_status()
    out.print(status.where)
    out.print(f"sessions: {status.sessions}   metric results: {status.results}")


@kg_app.command("stop")
def kg_stop() -> None:
    """Stop the embedded graph server (its data stays under MCE_HOME)."""
    from .service import stop_graph

    stopped = stop_graph()
    out.print("stopped" if stopped else "not running")


@kg_app.command("check")
def kg_check() -> None:
    """Resolve every graph property the catalog's metrics read against the live graph."""
    from .core.models import NODE_MODELS
    from .core.ontology import Label

    catalog = _catalog()
    kg = _graph()
    seen: dict[Label, set[str]] = {}
    missing: list[str] = []
    unset: list[str] = []
    checked = 0
    for d in sorted(catalog.definitions.values(), key=lambda d: d.name):
        for label, props in d.requires.items():
            keys = seen.setdefault(label, kg.property_keys(label))
            fields = NODE_MODELS[label].model_fields
            for prop in props:
                checked += 1
                if not keys or prop in keys:
                    continue
                # An optional property may be absent everywhere (no call failed, say).
                (missing if fields[prop].is_required() else unset).append(f"{d.name}: {label.value}.{prop}")
    empty = sorted(label.value for label, keys in seen.items() if not keys)
    if empty:
        out.print(f"[yellow]no nodes yet to check:[/yellow] {', '.join(empty)}")
    for u in unset:
        out.print(f"[yellow]optional, set on no node sampled:[/yellow] {u}")
    for m in missing:
        err.print(f"[red]not in the graph:[/red] {m}")
    if missing:
        raise typer.Exit(1)
    out.print(f"OK {len(catalog.definitions)} metrics resolve against the graph ({checked} property references checked)")


# -- synthetic data and the demo --------------------------------------------


@app.command()
def synth(
    path: Path,
    sessions: Annotated[int, typer.Option(min=0, help="Number of sessions.")] = 100,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
) -> None:
    """Write synthetic multi-agent sessions as an OpenTelemetry span export
    (seeded: the same seed writes the same file, byte for byte)."""
    from .synthetic import write_export

    summary = write_export(path, sessions, seed)
    out.print(f"wrote {summary.sessions} sessions ({summary.spans} spans) to {summary.path}")


@app.command()
def demo(
    sessions: Annotated[int, typer.Option(help="Synthetic sessions to generate.")] = 200,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 7,
) -> None:
    """Generate and ingest synthetic sessions, evaluate every enabled metric through
    Dagster, and summarise the results."""
    from .ingest import ingest_paths
    from .results import summarize, to_public, top_sessions
    from .runner import compute_sessions, default_dagster_home
    from .synthetic import write_export

    from .settings import Settings

    home = Settings.from_env().mce_home
    export = home / "demo" / f"synthetic-{sessions}-seed{seed}.json"
    export.parent.mkdir(parents=True, exist_ok=True)
    summary = write_export(export, sessions, seed)
    out.print(f"1. generated {summary.sessions} synthetic sessions ({summary.spans} spans) -> {export}")

    kg = _graph()
    started = time.perf_counter()
    report = ingest_paths([export], kg)
    elapsed = time.perf_counter() - started
    out.print(
        f"2. ingested {len(report.sessions)} sessions into the embedded FalkorDB at {home} in {elapsed:.1f} s "
        f"({len(report.sessions) / max(elapsed, 1e-9):,.0f} sessions/s); {len(report.problems)} row(s) not placed"
    )

    started = time.perf_counter()
    outcome = compute_sessions(report.sessions)
    elapsed = time.perf_counter() - started
    out.print(f"3. evaluated them in {len(outcome.runs)} Dagster run(s) in {elapsed:.1f} s")
    _report_failed_entities(outcome.failed_entities)
    if not outcome.success:
        err.print(f"[red]failed runs: {', '.join(outcome.failed_runs)}[/red]")
        raise typer.Exit(1)

    results = [to_public(p) for p in kg.read_results(report.sessions)]
    table = Table("scope", "metric", "entities", "mean", "min", "max", "sum/sum", title=f"{len(results):,} results")
    for s in summarize(results):
        table.add_row(s.scope, s.metric, f"{s.evaluated:,}", _fmt(s.mean), _fmt(s.minimum), _fmt(s.maximum), _fmt(s.pooled))
    out.print(table)
    errors = top_sessions(results, "SumToolError")
    cycles = top_sessions(results, "CyclesCount")
    for title, top in (("most tool errors", errors), ("most cycles", cycles)):
        if top:
            out.print(f"{title}:")
            for sid, v in top:
                out.print(f"  {int(v):>3}  {sid}")
    out.print(
        "\nSee the same runs, assets and lineage in the Dagster UI:\n"
        f"  DAGSTER_HOME={default_dagster_home()} MCE_HOME={home} .venv/bin/dagster dev -w workspace.yaml\n"
        f"One session's results: .venv/bin/mce kg metric get {report.sessions[0]} --recursive"
    )


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
