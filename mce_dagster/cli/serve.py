"""`mce serve`: the MCP server (stdio, or streamable HTTP) and the REST API, on
127.0.0.1 only."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..errors import InputError
from ._output import Commands, err

commands = Commands()


@commands.command()
def serve(
    http: Annotated[Optional[int], typer.Option("--http", metavar="PORT", help="MCP over streamable HTTP on 127.0.0.1:PORT/mcp.")] = None,
    api: Annotated[Optional[int], typer.Option("--api", metavar="PORT", help="The REST API on 127.0.0.1:PORT (the \\[api] extra).")] = None,
) -> None:
    """Serve the metric registry to agents: MCP over stdio (the default), MCP over HTTP, or the REST API."""
    if http is not None and api is not None:
        raise InputError("give --http or --api, not both")
    for port in (http, api):
        if port is not None and not 0 < port < 65536:
            raise InputError(f"port {port} is not between 1 and 65535")
    if api is not None:
        from ..serve.api import serve_api

        err.print(f"REST API on http://127.0.0.1:{api} (OpenAPI at /openapi.json)")
        serve_api(api)
        return
    from ..serve.mcp_server import serve_http, serve_stdio

    if http is not None:
        err.print(f"MCP over streamable HTTP on http://127.0.0.1:{http}/mcp")
        serve_http(http)
    else:
        serve_stdio()
