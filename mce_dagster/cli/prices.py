"""`mce prices`: the model price table the judge and the Cost metric read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from ._output import Commands, out

prices_app = Commands(help="The model price table (LiteLLM's model_prices_and_context_window.json).", no_args_is_help=True)


@prices_app.command("update")
def update(
    url: Annotated[Optional[str], typer.Option(help="Fetch from this URL (default: MODEL_PRICES_URL).")] = None,
    source: Annotated[Optional[Path], typer.Option("--from", help="Read a local copy instead of fetching.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Rewrite the committed, trimmed copy inside the package."""
    from ..prices import COMMITTED_PATH, update_committed
    from ..settings import Settings

    count = update_committed(url=url or (None if source else Settings.from_env().prices.url), source=source)
    if as_json:
        print(json.dumps({"models": count, "path": str(COMMITTED_PATH)}))
        return
    out.print(f"wrote {count} model prices to {COMMITTED_PATH}")


@prices_app.command("show")
def show(model: str, as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Show the USD per token a model is priced at, and the entry that priced it."""
    from ..prices import price_source
    from ..settings import Settings

    table = price_source(Settings.from_env().prices)
    price = table.current().price(model)
    if as_json:
        print(json.dumps({
            "model": model,
            "input_per_token": price.input_per_token,
            "output_per_token": price.output_per_token,
            "priced_as": price.priced_as,
            "table": str(table.source),
        }, indent=1))
        return
    note = f" (not in the table: priced as {price.priced_as})" if price.priced_as else ""
    out.print(
        f"{model}: input ${price.input_per_token:.3e}/token, output ${price.output_per_token:.3e}/token"
        f"{note}; table from {table.source}"
    )
