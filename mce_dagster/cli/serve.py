"""`mce serve`: the MCP server (stdio, or streamable HTTP) and the REST API, on
127.0.0.1 unless `--host` says otherwise, which needs MCE_API_TOKEN."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import InputError
from ._output import Commands, err

commands = Commands()


@commands.command()
def serve(
    http: Annotated[Optional[int], typer.Option("--http", metavar="PORT", help="MCP over streamable HTTP on 127.0.0.1:PORT/mcp.")] = None,
    api: Annotated[Optional[int], typer.Option("--api", metavar="PORT", help="The REST API on 127.0.0.1:PORT (the \\[api] extra).")] = None,
    host: Annotated[
        str, typer.Option("--host", metavar="ADDRESS", help="Serve --http or --api on this address; anything but loopback needs MCE_API_TOKEN.")
    ] = "127.0.0.1",
    workspace: Annotated[
        Optional[Path],
        typer.Option(
            "--workspace", metavar="FILE",
            help="With --api: the Dagster workspace file whose code location the instance's daemon launches runs from "
            "(default: the module mce_dagster.definitions, as workspace.yaml loads it).",
        ),
    ] = None,
) -> None:
    """Serve the metric registry to agents: MCP over stdio (the default), MCP over HTTP, or the REST API."""
    if http is not None and api is not None:
        raise InputError("give --http or --api, not both")
    if workspace is not None and api is None:
        raise InputError("--workspace is for --api: only the REST API submits runs")
    for port in (http, api):
        if port is not None and not 0 < port < 65536:
            raise InputError(f"port {port} is not between 1 and 65535")
    host = host.strip().strip("[]")
    if http is None and api is None:
        if host != "127.0.0.1":
            raise InputError("--host is for --http or --api: stdio has no address")
    else:
        from ..serve.guard import check_bind
        from ..settings import Settings

        check_bind(host, Settings.from_env())  # before the server's imports, and before anything is printed
    shown_host = f"[{host}]" if ":" in host else host
    if api is not None:
        from ..serve.api import serve_api

        err.print(f"REST API on http://{shown_host}:{api} (OpenAPI at /openapi.json)")
        serve_api(api, host, workspace)
        return
    from ..serve.mcp_server import serve_http, serve_stdio

    if http is not None:
        err.print(f"MCP over streamable HTTP on http://{shown_host}:{http}/mcp")
        serve_http(http, host)
    else:
        serve_stdio()
