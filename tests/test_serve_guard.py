"""The REST API and MCP over HTTP as an attacker meets them: `mce serve --api` and
`mce serve --http` run as real processes with MCE_API_TOKEN set, on the hand-made
graph of tests/registry_graph.py, and every test is one attack and what stops it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

import registry_graph

MCE = str(Path(sys.executable).with_name("mce"))
TOKEN = "test-token-" + "7f3a9c2e5b1d4068"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
KEPT = 5  # MCE_QUERY_RESULTS_KEPT of the MCP server under test
MB = 1 << 20
PROXIED_NAME = "mce.example.com"  # MCE_ALLOWED_HOSTS of the REST API under test, as behind a proxy
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}},
}
MCP_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def graph(kg):
    registry_graph.build(kg)
    return kg


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(mce_home: Path, **more: str) -> dict[str, str]:
    env = {**os.environ, "MCE_HOME": str(mce_home), **more}
    for name in ("DAGSTER_HOME", "MCE_API_TOKEN", "MCE_ALLOWED_HOSTS", "MCE_MAX_REQUEST_BYTES", "MCE_QUERY_RESULTS_KEPT"):
        if name not in more:
            env.pop(name, None)
    return env


def _start(args: list[str], env: dict[str, str], log: Path):
    port = _free_port()
    with log.open("wb") as out:  # stdout too: uvicorn's access log goes there
        process = subprocess.Popen([MCE, "serve", *args, str(port)], env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return process, url, port
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def api(graph, mce_home):
    log = mce_home / "api.log"
    process, url, port = _start(["--api"], _env(mce_home, MCE_API_TOKEN=TOKEN, MCE_ALLOWED_HOSTS=PROXIED_NAME), log)
    yield url
    process.terminate()
    process.wait(20)
    assert TOKEN not in log.read_text(errors="replace")


@pytest.fixture(scope="module")
def mcp(graph, mce_home):
    log = mce_home / "mcp.log"
    process, url, port = _start(["--http"], _env(mce_home, MCE_API_TOKEN=TOKEN, MCE_QUERY_RESULTS_KEPT=str(KEPT)), log)
    yield url
    process.terminate()
    process.wait(20)
    # The MCP server logs every request (its access log): the token is in none of them.
    assert "POST /mcp" in log.read_text(errors="replace")
    assert TOKEN not in log.read_text(errors="replace")


def _raw(url: str, request: bytes, *, then: bytes = b"", timeout: float = 30) -> bytes:
    """Send `request` (and `then`) on one connection, keep it open, and read the
    reply: a server that waited for more of the body would time out here."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(request)
        if then:
            s.sendall(then)
        reply = b""
        while b"\r\n\r\n" not in reply:
            data = s.recv(65536)
            if not data:
                break
            reply += data
        return reply


def _status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


# -- who may call ---------------------------------------------------------------------


@pytest.mark.parametrize("server", ["api", "mcp"])
def test_without_the_token_nothing_is_answered_but_liveness(server, request):
    url = request.getfixturevalue(server)
    if server == "api":
        call = lambda headers: httpx.get(f"{url}/metrics", headers=headers, timeout=30)  # noqa: E731
    else:
        call = lambda headers: httpx.post(f"{url}/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **headers}, timeout=30)  # noqa: E731
    absent = call({})
    assert absent.status_code == 401 and absent.headers["www-authenticate"].startswith("Bearer")
    wrong = call({"Authorization": f"Bearer {TOKEN[:-1]}x"})
    assert wrong.status_code == 401 and 'error="invalid_token"' in wrong.headers["www-authenticate"]
    assert call({"Authorization": f"Basic {TOKEN}"}).status_code == 401
    assert TOKEN not in absent.text + wrong.text
    assert call(AUTH).status_code == 200
    assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200


def test_the_schema_and_docs_take_the_token_too(api):
    assert httpx.get(f"{api}/openapi.json", timeout=30).status_code == 401
    assert httpx.get(f"{api}/openapi.json", headers=AUTH, timeout=30).json()["paths"]


def test_a_whole_mcp_session_goes_through_with_the_token(mcp):
    async def main() -> None:
        with anyio.fail_after(90):
            async with httpx2.AsyncClient(headers=AUTH) as client:
                async with streamable_http_client(f"{mcp}/mcp", http_client=client) as (read, write):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        listed = await session.call_tool("list_metrics", {})
                        assert not listed.is_error and "ToolErrorRate" in listed.content[0].text

    anyio.run(main)


# -- by which address -----------------------------------------------------------------


@pytest.mark.parametrize("server", ["api", "mcp"])
def test_a_rebound_name_is_misdirected(server, request):
    """A page at attacker.example whose name now resolves to 127.0.0.1 sends its own
    name as Host; even with the token, the answer is 421."""
    url = request.getfixturevalue(server)
    for path in ("/healthz", "/mcp" if server == "mcp" else "/metrics"):
        headers = {**AUTH, **MCP_HEADERS, "Host": "attacker.example"}
        assert httpx.get(f"{url}{path}", headers=headers, timeout=30).status_code == 421
    port = url.rsplit(":", 1)[1]
    assert httpx.get(f"{url}/healthz", headers={"Host": f"localhost:{port}"}, timeout=30).status_code == 200
    assert httpx.get(f"{url}/healthz", headers={"Host": f"localhost.attacker.example:{port}"}, timeout=30).status_code == 421


def test_the_name_a_reverse_proxy_passes_is_answered_and_no_look_alike(api):
    assert httpx.get(f"{api}/metrics", headers={**AUTH, "Host": PROXIED_NAME}, timeout=30).status_code == 200
    for look_alike in (f"{PROXIED_NAME}.attacker.example", f"attacker.{PROXIED_NAME}", f"{PROXIED_NAME}@attacker.example"):
        assert httpx.get(f"{api}/metrics", headers={**AUTH, "Host": look_alike}, timeout=30).status_code == 421, look_alike


def test_a_page_of_another_origin_is_refused(api):
    """A browser on a foreign page reaching 127.0.0.1 directly sends the right Host but
    its own Origin."""
    response = httpx.get(f"{api}/metrics", headers={**AUTH, "Origin": "http://attacker.example"}, timeout=30)
    assert response.status_code == 403
    assert httpx.get(f"{api}/metrics", headers={**AUTH, "Origin": api}, timeout=30).status_code == 200


@pytest.mark.parametrize("flag", ["--api", "--http"])
def test_serving_beyond_loopback_without_a_token_is_refused_at_start_up(flag, mce_home):
    port = _free_port()
    done = subprocess.run([MCE, "serve", flag, str(port), "--host", "0.0.0.0"], env=_env(mce_home), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "not a loopback address" in done.stderr and "MCE_API_TOKEN" in done.stderr
    with pytest.raises(OSError):  # and nothing was left listening
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_a_guessable_token_is_refused_and_not_echoed(mce_home):
    short = "hunter2"
    done = subprocess.run([MCE, "serve", "--api", str(_free_port())], env=_env(mce_home, MCE_API_TOKEN=short), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "MCE_API_TOKEN is shorter than" in done.stderr
    assert short not in done.stdout + done.stderr


# -- with how much --------------------------------------------------------------------


def _hundred_megabytes():
    chunk = b" " * MB
    for _ in range(100):
        yield chunk


@pytest.mark.parametrize("server, path", [("api", "/compute_metrics"), ("mcp", "/mcp")])
def test_a_hundred_megabyte_body_is_refused(server, path, request):
    url = request.getfixturevalue(server)
    headers = {**AUTH, **MCP_HEADERS}
    # streamed from a generator: chunked, no Content-Length to refuse it by
    streamed = httpx.post(f"{url}{path}", content=_hundred_megabytes(), headers=headers, timeout=60)
    assert streamed.status_code == 413
    # a Content-Length of 100 MB and no body at all: refused on the header alone
    declared = (f"POST {path} HTTP/1.1\r\nHost: {url.removeprefix('http://')}\r\nAuthorization: Bearer {TOKEN}\r\n"
                f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                f"Content-Length: {100 * MB}\r\n\r\n").encode()
    assert _status(_raw(url, declared)) == 413


def test_a_chunked_body_is_refused_once_it_passes_the_limit(api):
    """Two megabytes of chunks, then the connection stays open and silent: the reply
    comes without the end of the body, so the server counted as it read."""
    head = (f"POST /compute_metrics HTTP/1.1\r\nHost: {api.removeprefix('http://')}\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    chunk = b" " * 65536
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(32))
    assert _status(_raw(api, head, then=chunks)) == 413


def test_a_body_under_the_limit_is_read(api):
    response = httpx.post(f"{api}/compute_metrics", content=b" " * (MB - 100) + b'{"session_ids": []}',
                          headers={**AUTH, "content-type": "application/json"}, timeout=60)
    assert response.status_code == 422 and response.json()["field"] == "session_ids"


# -- ids and names, and what a refusal quotes -------------------------------------------

MEGABYTE_ID = "x" * 1_000_000


def test_a_megabyte_session_id_in_a_body_is_refused_briefly(api):
    for body in ({"session_ids": [MEGABYTE_ID]}, {"session_ids": ["s1"], "metrics": [MEGABYTE_ID]}, {"session_ids": ["s1"], MEGABYTE_ID: 1}):
        response = httpx.post(f"{api}/compute_metrics", json=body, headers=AUTH, timeout=60)
        assert response.status_code == 422, response.text[:300]
        assert len(response.content) < 1024


@pytest.mark.parametrize("length", [300, 60_000, 1_000_000])
def test_a_long_session_id_in_a_path_is_refused_briefly(api, length):
    request = (f"GET /sessions/{'x' * length}/metrics HTTP/1.1\r\nHost: {api.removeprefix('http://')}\r\n"
               f"Authorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n").encode()
    host, port = api.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(request)
        reply = b""
        while data := s.recv(65536):
            reply += data
    assert _status(reply) in (400, 414, 422), reply[:300]
    assert len(reply) < 1024


def test_a_404_quotes_only_a_prefix_of_the_id(api):
    """The longest id allowed is looked up, and the refusal quotes a short prefix."""
    long_id = "q" * 256
    for response in (
        httpx.get(f"{api}/sessions/{long_id}/metrics", headers=AUTH, timeout=60),
        httpx.get(f"{api}/runs/{long_id}", headers=AUTH, timeout=60),
        httpx.post(f"{api}/compute_metrics", json={"session_ids": [long_id, "s1"]}, headers=AUTH, timeout=60),
    ):
        assert response.status_code == 404, response.text[:300]
        assert "q" * 64 in response.text and "q" * 65 not in response.text


def _tool(url: str, name: str, arguments: dict) -> tuple[bool, str]:
    """One tool call in a session of its own: (is_error, the reply's text)."""

    async def main() -> tuple[bool, str]:
        with anyio.fail_after(120):
            async with httpx2.AsyncClient(headers=AUTH, timeout=60) as client:
                async with streamable_http_client(f"{url}/mcp", http_client=client) as (read, write):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        result = await session.call_tool(name, arguments)
                        return bool(result.is_error), result.content[0].text

    return anyio.run(main)


def _saved(mce_home: Path) -> set[str]:
    return {p.name for p in (mce_home / "query_results").glob("*.json")}


def test_a_megabyte_tool_argument_is_refused_briefly_and_saves_nothing(mcp, mce_home):
    before = _saved(mce_home) if (mce_home / "query_results").exists() else set()
    for name, arguments in (
        ("query_metric", {"metric": "ToolErrorRate", "session_id": MEGABYTE_ID}),
        ("query_metric", {"metric": MEGABYTE_ID}),
        ("get_metric", {"metric": MEGABYTE_ID}),
        ("verify_answer", {"result_id": MEGABYTE_ID, "text": "42"}),
    ):
        is_error, text = _tool(mcp, name, arguments)
        assert is_error or "error" in json.loads(text), text[:300]
        assert len(text) < 1024, (name, text[:300])
    assert (_saved(mce_home) if (mce_home / "query_results").exists() else set()) == before


def test_the_same_query_ten_times_keeps_one_file(mcp, mce_home):
    async def main() -> set[str]:
        with anyio.fail_after(120):
            async with httpx2.AsyncClient(headers=AUTH, timeout=60) as client:
                async with streamable_http_client(f"{mcp}/mcp", http_client=client) as (read, write):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        ids = set()
                        for _ in range(10):
                            result = await session.call_tool("query_metric", {"metric": "ToolErrorRate", "by": "app"})
                            ids.add(json.loads(result.content[0].text)["result_id"])
                        return ids

    before = _saved(mce_home) if (mce_home / "query_results").exists() else set()
    (result_id,) = anyio.run(main)
    assert _saved(mce_home) - before == {f"{result_id}.json"}


def test_more_distinct_queries_than_the_bound_keep_the_newest(mcp, mce_home):
    ids = []
    for day in range(1, KEPT + 4):
        is_error, text = _tool(mcp, "query_metric", {"metric": "ToolErrorRate", "since": f"2025-01-{day:02d}"})
        assert not is_error, text
        ids.append(json.loads(text)["result_id"])
    assert len(set(ids)) == len(ids)
    saved = _saved(mce_home)
    assert len(saved) <= KEPT
    assert {f"{i}.json" for i in ids[-KEPT:]} == saved  # the oldest went first
    is_error, newest = _tool(mcp, "verify_answer", {"result_id": ids[-1], "text": "33.3% of tool calls failed."})
    assert not is_error and json.loads(newest)["passed"], newest
    is_error, oldest = _tool(mcp, "verify_answer", {"result_id": ids[0], "text": "33.3% of tool calls failed."})
    assert "no stored result" in json.loads(oldest)["error"]
