"""The MCP server: four tools over the registry, and no fifth.

    mce serve              # stdio, for a client that starts the process
    mce serve --http 8765  # streamable HTTP on 127.0.0.1:8765/mcp
    MCE_API_TOKEN=... mce serve --http 8765 --host 0.0.0.0

Over HTTP every request but `GET /healthz` passes the checks of `serve.guard`
(Host, the bearer token when MCE_API_TOKEN is set, body size) before the SDK sees
it, and every tool argument is bounded in length.

There is no tool that runs Cypher: an agent names a metric, a scope, filters and at
most one allowed cut, and gets the numbers with the Cypher that produced them; the
definitions it reads come from `metric_defs/` and it cannot supply its own. Each tool
returns one JSON object; a refusal is an object with `error`, the `field` refused and
what is `allowed`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from .. import service
from ..errors import MCEError
from ..files import keep_private
from .guard import LIVENESS_PATH, MAX_ID_LENGTH, MAX_NAME_LENGTH, MAX_TEXT_LENGTH, MAX_TIME_LENGTH

Name = Annotated[str, Field(max_length=MAX_NAME_LENGTH)]
Id = Annotated[str, Field(max_length=MAX_ID_LENGTH)]
Time = Annotated[str, Field(max_length=MAX_TIME_LENGTH)]

TOOLS = ("list_metrics", "get_metric", "query_metric", "verify_answer")
HOST = "127.0.0.1"

INSTRUCTIONS = """\
Metrics computed over multi-agent sessions (tool error rates, durations, costs, token
counts, judged scores). Call list_metrics to see what exists, get_metric for what one
means (read its caveats), query_metric for the numbers, and verify_answer on every
sentence you write with numbers from a result before you send it. A metric, scope or
cut that is refused is not available: say so rather than approximating it."""


def _answer(call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return call()
    except MCEError as exc:
        as_json = getattr(exc, "as_json", None)
        return as_json() if as_json else {"error": str(exc), "field": None, "allowed": []}


def build_server() -> MCPServer:
    server = MCPServer("mce", instructions=INSTRUCTIONS)

    @server.tool()
    def list_metrics() -> dict[str, Any]:
        """Every metric: name, provider, scopes, unit and one line of description."""
        return _answer(lambda: {"metrics": service.list_metrics()})

    @server.tool()
    def get_metric(metric: Name) -> dict[str, Any]:
        """What one metric means: description, caveats, value range, version, how it
        rolls up, and the cuts allowed at each scope. `metric`: Name or provider.Name."""
        return _answer(lambda: service.get_metric(metric))

    @server.tool()
    def query_metric(
        metric: Name,
        scope: Name = "Session",
        session_id: Id | None = None,
        app: Name | None = None,
        agent: Name | None = None,
        since: Time | None = None,
        until: Time | None = None,
        by: Name | None = None,
    ) -> dict[str, Any]:
        """Values of one metric: for a session (session_id), or rolled up over an app,
        an agent (AgentCall scope) or a window (since/until, ISO 8601, on the session
        start; until is exclusive), cut by at most one dimension the metric allows (by:
        see get_metric). Returns result_id, rows (value, and numerator/denominator for
        ratios, count), notes (incomplete windows), and the Cypher that produced it."""
        return _answer(lambda: service.query_metric(metric, scope, session_id, app, agent, since, until, by))

    @server.tool()
    def verify_answer(result_id: Id, text: Annotated[str, Field(max_length=MAX_TEXT_LENGTH)]) -> dict[str, Any]:
        """Check every number in `text` against the result `result_id`: a number in a
        sentence that names a session, agent, app, model, tool or period is checked
        against that entry only, at the precision written. Returns passed and each
        number with why it passed or failed. Numbers only: it does not judge meaning."""
        return _answer(lambda: service.verify_answer(result_id, text))

    @server.custom_route(LIVENESS_PATH, methods=["GET"], include_in_schema=False)
    async def healthz(request: Any) -> Any:
        from starlette.responses import JSONResponse

        return JSONResponse({"status": "ok"})

    return server


def serve_stdio() -> None:
    keep_private()  # the query results it saves
    build_server().run("stdio")


def serve_http(port: int, host: str = HOST) -> None:
    """Streamable HTTP on host:port/mcp behind the guard; refused at once where it is
    not safe."""
    import uvicorn

    from ..settings import Settings
    from .guard import AllowedHosts, check_bind, guarded

    keep_private()
    settings = Settings.from_env()
    check_bind(host, settings)
    server = build_server()
    app = server.streamable_http_app(
        host=host,
        transport_security=AllowedHosts.for_server(host, port, settings.allowed_hosts).as_mcp_security(),
        max_request_body_size=settings.max_request_bytes,
    )
    uvicorn.run(guarded(app, host, port, settings), host=host, port=port, log_level=server.settings.log_level.lower())
