"""The MCP server through the SDK's own client, over stdio and over streamable HTTP:
`mce serve` and `mce serve --http PORT` run as real processes on the hand-made graph
of tests/registry_graph.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

import registry_graph
from mce_dagster.serve.mcp_server import TOOLS

MCE = str(Path(sys.executable).with_name("mce"))


@pytest.fixture(scope="module")
def graph(kg):
    registry_graph.build(kg)
    return kg


def _env(mce_home: Path) -> dict[str, str]:
    return {**os.environ, "MCE_HOME": str(mce_home)}


def _call(result) -> dict:
    assert not result.is_error, result
    if result.structured_content is not None:
        data = result.structured_content
        return data.get("result", data) if set(data) == {"result"} else data
    return json.loads(result.content[0].text)


async def _exercise(session: ClientSession) -> None:
    await session.initialize()
    tools = await session.list_tools()
    assert sorted(t.name for t in tools.tools) == sorted(TOOLS)  # four, and no run_cypher

    listed = _call(await session.call_tool("list_metrics", {}))
    assert "ToolErrorRate" in {m["metric"] for m in listed["metrics"]}
    meaning = _call(await session.call_tool("get_metric", {"metric": "ToolErrorRate"}))
    assert meaning["caveats"] and "agent" in meaning["cuts"]["AgentCall"]

    # a rolled-up rate, with its components
    answer = _call(await session.call_tool("query_metric", {"metric": "ToolErrorRate", "scope": "AgentCall", "by": "agent"}))
    rows = {r["agent"]: r for r in answer["rows"]}
    assert (rows["researcher"]["numerator"], rows["researcher"]["denominator"]) == (4.0, 9.0)
    assert answer["cypher"].startswith("MATCH") and answer["result_id"]
    rid = answer["result_id"]

    good = _call(await session.call_tool("verify_answer", {"result_id": rid, "text": "The researcher failed 44.4% of its tool calls."}))
    assert good["passed"]
    invented = _call(await session.call_tool("verify_answer", {"result_id": rid, "text": "The researcher failed 47% of its tool calls."}))
    assert not invented["passed"]
    misattributed = _call(await session.call_tool("verify_answer", {"result_id": rid, "text": "The writer failed 44.4% of its tool calls."}))
    assert not misattributed["passed"] and "agent researcher" in misattributed["numbers"][0]["reason"]

    refused = _call(await session.call_tool("query_metric", {"metric": "ToolErrorRate", "by": "tool"}))
    assert refused["field"] == "by" and refused["allowed"] == ["app", "session", "day", "month"]
    assert "Allowed: app, session, day, month" in refused["error"]


def test_over_stdio(graph, mce_home):
    params = StdioServerParameters(command=MCE, args=["serve"], env={"MCE_HOME": str(mce_home), "PATH": os.environ.get("PATH", "")})

    async def main() -> None:
        with anyio.fail_after(90), open(os.devnull, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await _exercise(session)

    anyio.run(main)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(port: int, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read().decode()[-3000:]
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


def test_over_streamable_http_on_loopback_only(graph, mce_home):
    port = _free_port()
    process = subprocess.Popen([MCE, "serve", "--http", str(port)], env=_env(mce_home), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_for(port, process)

        async def main() -> None:
            with anyio.fail_after(90):
                await _over_http(port)

        async def _over_http(port: int) -> None:
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write):
                async with ClientSession(read, write) as session:
                    await _exercise(session)

        anyio.run(main)
        listening = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout
        if listening:  # ss is there: the server is bound to loopback and nothing else
            assert all("127.0.0.1:" in line for line in listening.strip().splitlines()), listening
    finally:
        process.terminate()
        process.wait(20)
