"""A `dagster-daemon` for the local instance when nothing else launches its queued
runs: `mce serve --api` submits runs to the queue, and on the local default no daemon
may be running (`dagster dev` and a deployment run their own).

The daemon is Dagster's own (`dagster-daemon run`, its public command): it launches
queued runs, at most the instance's `max_concurrent_runs` at once, through the code
location the runs name, monitors them and runs the sensors that are switched on. It is
started only when the instance has no live queue daemon (a heartbeat in the last
`HEARTBEAT_FRESH_S`), as a child of this process that ends with it.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import dagster as dg

#: The daemon that launches queued runs, as its heartbeats name it.
QUEUE_DAEMON = "QUEUED_RUN_COORDINATOR"
#: A heartbeat younger than this says a daemon is running (it beats every 30 s).
HEARTBEAT_FRESH_S = 90.0
_PR_SET_PDEATHSIG = 1


def queue_daemon_alive(instance: dg.DagsterInstance, now: float | None = None) -> bool:
    beat = instance.get_daemon_heartbeats().get(QUEUE_DAEMON)
    return beat is not None and (now or time.time()) - beat.timestamp < HEARTBEAT_FRESH_S


def _end_with_parent() -> None:  # runs in the child, before exec
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: stopped at exit instead
        pass


class LocalDaemon:
    """The daemon this process started, if it had to."""

    def __init__(self, code_location_arguments: Sequence[str], log_path: Path):
        self._arguments = list(code_location_arguments)
        self._log_path = log_path
        self.process: subprocess.Popen | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def ensure(self, instance: dg.DagsterInstance) -> bool:
        """Start the daemon unless this process's one runs or another is alive;
        True when one was started now."""
        if self.running or queue_daemon_alive(instance):
            return False
        self.stop()  # reap one that ended
        command = [str(Path(sys.executable).with_name("dagster-daemon")), "run", *self._arguments]
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._log_path, "ab") as log:
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                preexec_fn=_end_with_parent if sys.platform.startswith("linux") else None,
            )
        return True

    def stop(self, timeout_s: float = 30.0) -> None:
        """End the daemon (it stops its code server) and reap it."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
        process.wait()
