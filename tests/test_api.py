"""The REST API as a running server (`mce serve --api PORT`), through a real HTTP
client: the catalog, the status, bad input named, and POST /compute_metrics on
synthetic sessions leading to results that GET /sessions/{id}/metrics returns; then
fuzzed with schemathesis against its own schema."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

MCE = str(Path(sys.executable).with_name("mce"))


@pytest.fixture(scope="module")
def sessions(mce_home):
    from mce_dagster import service
    from mce_dagster.synthetic import write_export

    export = write_export(mce_home / "synthetic.json", 3, seed=11)
    service.ingest([export.path])
    return service.sessions_to_evaluate([], True)


@pytest.fixture(scope="module")
def server(mce_home, sessions):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MCE_HOME": str(mce_home)}
    env.pop("DAGSTER_HOME", None)
    process = subprocess.Popen([MCE, "serve", "--api", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, process.stderr.read().decode()[-3000:]
        try:
            httpx.get(f"{url}/openapi.json", timeout=1)
            break
        except httpx.TransportError:
            assert time.monotonic() < deadline, "the API did not start"
            time.sleep(0.2)
    yield url
    process.terminate()
    process.wait(20)


def test_catalog_and_status(server):
    metrics = httpx.get(f"{server}/metrics", timeout=30).json()
    assert "ToolErrorRate" in {m["metric"] for m in metrics}
    status = httpx.get(f"{server}/status", timeout=30).json()
    assert status["graph"]["reachable"] and status["instance"]["reachable"]
    assert status["versions"]["dagster"] == "1.13.27"


@pytest.mark.parametrize(
    "body, status, field",
    [
        ({"session_ids": []}, 422, "session_ids"),
        ({"session_ids": "s1"}, 422, "session_ids"),
        ({"session_ids": ["absent-session"]}, 404, "session_ids"),
        # JSON escapes a client may send: Python reads them as a NUL and a lone surrogate.
        (b'{"session_ids": ["nul\\u0000in-id", "lone\\ud800surrogate"]}', 404, "session_ids"),
        ({"session_ids": ["x"], "metrics": ["NoSuchMetric"]}, 422, "metrics"),
        ({"session_ids": ["x"], "colour": "red"}, 422, "colour"),
    ],
)
def test_bad_input_is_a_4xx_that_names_the_field(server, body, status, field):
    if isinstance(body, bytes):
        response = httpx.post(f"{server}/compute_metrics", content=body, headers={"content-type": "application/json"}, timeout=60)
    else:
        response = httpx.post(f"{server}/compute_metrics", json=body, timeout=60)
    assert response.status_code == status, response.text
    assert response.json()["field"] == field


def test_compute_runs_through_the_instance_and_results_come_back(server, sessions):
    assert httpx.get(f"{server}/sessions/{sessions[0]}/metrics").json() == []
    response = httpx.post(f"{server}/compute_metrics", json={"session_ids": sessions, "metrics": ["ToolErrorRate", "Duration"]}, timeout=60)
    assert response.status_code == 202, response.text
    run_ids = response.json()["run_ids"]
    assert run_ids
    deadline = time.monotonic() + 90
    for run_id in run_ids:
        while True:
            report = httpx.get(f"{server}/runs/{run_id}", timeout=30).json()
            if report["done"]:
                break
            assert time.monotonic() < deadline, report
            time.sleep(0.5)
        assert report["status"] == "SUCCESS", report
        assert {r["metric"] for r in report["results"]} >= {"Duration"}
    stored = httpx.get(f"{server}/sessions/{sessions[0]}/metrics").json()
    assert {"Duration"} <= {r["metric"] for r in stored}
    assert all(r["session_id"] == sessions[0] for r in stored)
    assert httpx.get(f"{server}/sessions/absent-session/metrics").status_code == 404
    assert httpx.get(f"{server}/runs/no-such-run").status_code == 404


def test_schemathesis_finds_no_server_error(server):
    """Its own CLI against the served schema: no response is a 5xx. Random session
    ids are not in the graph, so POST /compute_metrics answers 404 and starts no run.
    A reply slower than its 10 s default (a starved machine) is not a server error."""
    done = subprocess.run(
        [str(Path(sys.executable).with_name("schemathesis")), "run", f"{server}/openapi.json",
         "--checks", "not_a_server_error", "--max-examples", "30", "--no-color", "--request-timeout", "60"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
