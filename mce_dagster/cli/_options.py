"""The options every command takes, given before it (`mce -v --env-file prod.env
compute --all`): how much goes to standard error, and an env file read before
anything reads the settings."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from ..errors import MCEError
from ..files import keep_private
from . import _output

log = logging.getLogger("mce_dagster.cli")
_HANDLER_NAME = "mce-cli"


def configure_logging(verbosity: int) -> None:
    """Warnings by default; the project's info lines with -v; with -vv its debug
    lines and other libraries' info. On standard error, so stdout stays the data."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    # By default a warning reads as a sentence; asked for more, each line says where it comes from.
    handler.setFormatter(logging.Formatter("%(message)s" if verbosity == 0 else "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    # Other libraries (alembic, dagster's storage) say a lot at info: only with -vv.
    root.setLevel(logging.INFO if verbosity >= 2 else logging.WARNING)
    logging.getLogger("mce_dagster").setLevel({0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG))


def main_options(
    verbose: Annotated[
        int, typer.Option("--verbose", "-v", count=True, help="More on standard error: -v info, -vv debug (by default warnings only).")
    ] = 0,
    env_file: Annotated[
        Optional[Path],
        typer.Option("--env-file", metavar="PATH", help="Set the NAME=value lines of this file in the environment first (over variables already set)."),
    ] = None,
) -> None:
    keep_private()  # before the command writes anything (and starts the graph server)
    _output.verbosity = verbose
    configure_logging(verbose)
    if env_file is not None:
        from ..settings import load_env_file

        try:
            values = load_env_file(env_file)
        except MCEError as exc:
            _output.err.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True, highlight=False)
            raise typer.Exit(2) from None
        log.info("read %d variable(s) from %s: %s", len(values), env_file, ", ".join(sorted(values)) or "none")
    if log.isEnabledFor(logging.DEBUG):
        from ..settings import Settings

        s = Settings.from_env()
        log.debug("settings: MCE_HOME=%s DAGSTER_HOME=%s graph=%s judge=%s", s.mce_home, s.dagster_home, s.graph_backend, s.judge.model or "none")
