"""`mce provider list`: the metric providers, whether each can run, and what it brings."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from .. import service
from ._output import Commands, out

provider_app = Commands(help="Metric providers: native, DeepEval, Ragas, Opik and installed plugins.", no_args_is_help=True)


@provider_app.command("list")
def provider_list(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """List the metric providers and whether each can run.

    Each provider: where it comes from, its library and version, whether that
    library is installed (else how to install it), and its metrics."""
    from ..providers import provider_statuses

    statuses = provider_statuses(service.catalog())
    if as_json:
        print(json.dumps([s.as_dict() for s in statuses], indent=2))
        return
    table = Table("provider", "library", "status", "metrics", "source")
    for s in statuses:
        library = f"{s.library} {s.library_version or ''}".strip() if s.library else "-"
        status = "available" if s.available else f"unavailable: {s.reason}"
        # the native catalog is long: `mce metric list --provider native` lists it
        metrics = ", ".join(s.metrics) if len(s.metrics) <= 12 else f"{len(s.metrics)} metrics"
        table.add_row(s.provider, library, status, metrics, s.source)
    out.print(table)
