"""`mce`: the commands a person types, one module per command group.

Commands parse arguments, call `mce_dagster.service` and print; they carry no
logic of their own. Nothing heavy is imported before a command needs it, so
`mce --help` and the graph commands start without Dagster.
"""

from __future__ import annotations

from ._options import main_options
from ._output import Commands
from .demo import commands as demo_commands
from .evaluate import commands as evaluate_commands
from .export import commands as export_commands
from .kg import kg_app
from .metric import metric_app
from .prices import prices_app
from .provider import provider_app
from .report import commands as report_commands
from .serve import commands as serve_commands

# A bug's traceback shows code, never the values of local variables: they hold passwords
# (the Neo4j driver's arguments, the broker's URL).
app = Commands(help="Metrics Computation Engine for multi-agent systems, on Dagster.", no_args_is_help=True, pretty_exceptions_show_locals=False)
app.callback()(main_options)  # -v/-vv, --env-file: before any command reads the settings
app.add_typer(evaluate_commands)  # no name: `mce ingest`, `mce compute` at the top
app.add_typer(demo_commands)
app.add_typer(export_commands)  # `mce export`
app.add_typer(metric_app, name="metric")
app.add_typer(provider_app, name="provider")
app.add_typer(kg_app, name="kg")
app.add_typer(prices_app, name="prices")
app.add_typer(serve_commands)  # `mce serve`
app.add_typer(report_commands)  # `mce report`

__all__ = ["app"]
