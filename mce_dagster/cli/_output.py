"""What every command prints with: two consoles and the number format."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import MCEError

# Tables stay readable when the output is a file or a pipe (Rich assumes 80 columns).
out = Console(width=None if sys.stdout.isatty() else 132)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 132)


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


class Commands(typer.Typer):
    """A Typer whose commands turn an `MCEError` (something the user can fix) into
    one line on stderr and exit code 2. Any other exception is a bug and keeps its
    traceback."""

    def command(self, *args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        register = super().command(*args, **kwargs)

        def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(function)
            def run(*a: Any, **k: Any) -> Any:
                try:
                    return function(*a, **k)
                except MCEError as exc:
                    err.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True, highlight=False)
                    raise typer.Exit(2) from None

            register(run)
            return function

        return decorate
