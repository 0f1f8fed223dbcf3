"""The Dagster webserver and daemon as processes on a local instance, and a small
GraphQL client for the webserver: what `make dev` starts, driven the way the UI
drives it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import REPO

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition: Callable[[], Any], timeout: float, what: str, log: Callable[[], str] = lambda: "", every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout:.0f} s\n{log()}")
        time.sleep(every)


class GraphQLError(AssertionError):
    pass


class DagsterProcesses:
    """`dagster-webserver` and/or `dagster-daemon run` on workspace.yaml, each in its
    own process group (the code servers and run workers they start are in it), with
    their output in `logs`."""

    def __init__(self, env: dict[str, str], logs: Path):
        self.env = env
        self.logs = logs
        logs.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.processes: dict[str, subprocess.Popen] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _start(self, name: str, args: list[str]) -> subprocess.Popen:
        with open(self.logs / f"{name}.log", "w") as log:
            process = subprocess.Popen(
                args, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        self.processes[name] = process
        return process

    def start_webserver(self) -> subprocess.Popen:
        return self._start(
            "webserver",
            [str(BIN / "dagster-webserver"), "-w", str(REPO / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(self.port)],
        )

    def start_daemon(self) -> subprocess.Popen:
        return self._start("daemon", [str(BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")])

    def log(self, lines: int = 40) -> str:
        """The tail of each process's output, without the run workers' DEBUG events."""
        out = []
        for path in sorted(self.logs.glob("*.log")):
            kept = [line for line in path.read_text(errors="replace").splitlines() if " - DEBUG - " not in line]
            out.append(f"--- {path.name}\n" + "\n".join(kept[-lines:]))
        return "\n".join(out)

    def stop(self) -> None:
        for process in self.processes.values():
            _signal_group(process, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(process, signal.SIGKILL)  # whatever of the group is left
            process.wait(10)

    # GraphQL

    def graphql(self, query: str, variables: dict[str, Any] | None = None, timeout: float = 60) -> dict[str, Any]:
        """The query's `data`; GraphQLError with the errors when it has any."""
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(f"{self.url}/graphql", data=body, headers={"Content-Type": "application/json"})
        answer = json.loads(urllib.request.urlopen(request, timeout=timeout).read())
        if answer.get("errors"):
            raise GraphQLError(json.dumps(answer["errors"], indent=1)[:4000])
        return answer["data"]

    def wait_for_code_location(self, timeout: float = 240) -> None:
        """Until the webserver answers and has loaded the code location."""
        def loaded() -> bool:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise AssertionError(f"{name} exited {process.returncode}\n{self.log()}")
            try:
                data = self.graphql("{ assetNodes { id } }", timeout=10)
            except (OSError, urllib.error.URLError, GraphQLError):
                return False
            return bool(data["assetNodes"])

        wait_for(loaded, timeout, f"the webserver at {self.url} serving the asset graph", self.log)


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass
