"""What every command prints with: two consoles and the number format."""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import MCEError, UnknownSessionError

# Tables stay readable when the output is a file or a pipe (Rich assumes 80 columns).
out = Console(width=None if sys.stdout.isatty() else 132)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 132)
# -v count of this invocation (set by the options every command takes).
verbosity = 0
# Below this many sessions a command is quick enough to need no progress bar.
PROGRESS_AFTER_SESSIONS = 10


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def next_step(exc: MCEError) -> str | None:
    """What a person does about an error, where its kind says it: on the same line."""
    from ..errors import GraphUnavailableError, ServiceError, UnknownSessionError

    if isinstance(exc, UnknownSessionError):
        return "ingest them first with `mce ingest FILE`; `mce kg status` says which graph this is"
    if isinstance(exc, GraphUnavailableError):
        return "start the graph server, or unset NEO4J_URI to use the embedded graph; `mce -v kg status` says where it looks"
    if isinstance(exc, ServiceError):
        return "check that the service runs and the settings point at it (`mce -vv ...` prints them)"
    return None


def prose(text: str | None) -> str | None:
    """A docstring as help text: each paragraph on one line, so the terminal wraps
    it at its own width (Rich keeps a docstring's line breaks as they are written).
    A paragraph that starts with \\b is Click's mark for text kept as written."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs)


class Commands(typer.Typer):
    """A Typer whose commands turn an `MCEError` (something the user can fix) into
    one line on stderr and exit code 2, or 1 for a session the graph does not hold
    (as every command that reads results answers for one). Any other exception is a
    bug and keeps its traceback. Help is the docstring, its paragraphs re-flowed."""

    def __init__(self, *args: Any, help: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, help=prose(help), **kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
            register = super(Commands, self).command(*args, **{"help": prose(function.__doc__), **kwargs})

            @functools.wraps(function)
            def run(*a: Any, **k: Any) -> Any:
                try:
                    return function(*a, **k)
                except MCEError as exc:
                    hint = next_step(exc)
                    err.print(f"[red]error:[/red] {escape(str(exc))}" + (f" [dim](next: {escape(hint)})[/dim]" if hint else ""), soft_wrap=True, highlight=False)
                    raise typer.Exit(1 if isinstance(exc, UnknownSessionError) else 2) from None

            register(run)
            return function

        return decorate


@contextlib.contextmanager
def progress(label: str, total: int | None) -> Iterator[Callable[[int], None] | None]:
    """A progress bar on standard error while the block runs, advanced by calling
    what it yields with how many more are done; None (no bar) for a few, or when
    standard error is not a terminal (TTY_COMPATIBLE=1 or FORCE_COLOR=1 make it
    count as one). `total` None: not known ahead, the bar counts up."""
    if (total is not None and total <= PROGRESS_AFTER_SESSIONS) or not err.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)
