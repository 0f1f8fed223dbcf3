"""`mce metric` and `mce provider`: the catalog."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from rich.table import Table

from .. import service
from ._output import Commands, out

metric_app = Commands(help="The metric catalog.", no_args_is_help=True)
provider_app = Commands(help="Metric providers.", no_args_is_help=True)


@metric_app.command("list")
def metric_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    provider: Annotated[Optional[str], typer.Option(help="Only this provider.")] = None,
) -> None:
    """List the metrics of the catalog."""
    defs = sorted(service.catalog().definitions.values(), key=lambda d: (d.provider, d.name))
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
def metric_show(
    name: Annotated[str, typer.Argument(help="Name, or provider.Name.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the definition as JSON.")] = False,
) -> None:
    """Show one metric's definition."""
    d = service.catalog().find(name)
    if as_json:
        print(json.dumps(_definition_json(d), indent=2))
        return
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
    catalog = service.catalog()
    table = Table("provider", "source", "metrics")
    for provider, source in sorted(catalog.providers.items()):
        count = sum(1 for (p, _) in catalog.definitions if p == provider)
        table.add_row(provider, source, str(count))
    out.print(table)
