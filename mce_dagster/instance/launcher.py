"""Dagster's DefaultRunLauncher with a health check, so that run monitoring covers the
runs the daemon launches.

The stock launcher has none (`supports_check_run_worker_health` is False): the
monitoring daemon then only times out runs that never start, and a STARTED run whose
worker died with its code server (a reboot, an OOM kill of the group) stays STARTED.
A worker can be checked when its pid means something here: the code server was
started by this deployment on this host (a `python_module`/`python_file` workspace
entry, as in workspace.yaml), or the run carries mce's host/pid tags (runs `mce`
starts in its own process). Otherwise the worker is taken to be running: the daemon
fails a run on any other answer.
"""

from __future__ import annotations

from dagster import DagsterEventType, DagsterRun, DefaultRunLauncher

# Private: what `RunLauncher.check_run_worker_health` returns (the run launcher API).
from dagster._core.launcher.base import CheckRunHealthResult, WorkerStatus

# Private: the origin of a code server this deployment starts (a `python_module` /
# `python_file` workspace entry), told apart from one it does not start.
from dagster._core.remote_origin import ManagedGrpcPythonEnvCodeLocationOrigin

from .processes import pid_running, process_started_at, tagged_process_gone

# Logged by the run worker itself (dagster/_grpc/impl.py), with the pid as metadata.
WORKER_STARTED = "Started process for run"
# /proc start times are whole clock ticks after a whole-second boot time.
CLOCK_SLACK_S = 2.0


class MonitoredRunLauncher(DefaultRunLauncher):
    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        gone = tagged_process_gone(run.tags)
        if gone is not None:
            return _result(not gone, f"mce process {run.tags.get('mce/pid')}")
        origin = run.remote_job_origin
        if origin is None or not isinstance(origin.repository_origin.code_location_origin, ManagedGrpcPythonEnvCodeLocationOrigin):
            return CheckRunHealthResult(WorkerStatus.RUNNING, "the run worker is not a process of this host: not checked")
        started = self._worker_started(run.run_id)
        if started is None:
            return CheckRunHealthResult(WorkerStatus.RUNNING, "no run worker process recorded yet")
        pid, at = started
        if not pid_running(pid):
            return _result(False, f"run worker process {pid}")
        since = process_started_at(pid)
        # A process younger than the worker's first event holds a reused pid.
        return _result(since is None or since <= at + CLOCK_SLACK_S, f"run worker process {pid}")

    def _worker_started(self, run_id: str) -> tuple[int, float] | None:
        found = None
        for entry in self._instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
            event = entry.dagster_event
            if event is None or not (event.message or "").startswith(WORKER_STARTED):
                continue
            pid = event.engine_event_data.metadata.get("pid")
            if pid is not None and str(pid.value).isdigit():
                found = (int(pid.value), entry.timestamp)
        return found


def _result(running: bool, what: str) -> CheckRunHealthResult:
    if running:
        return CheckRunHealthResult(WorkerStatus.RUNNING, f"{what} is running")
    return CheckRunHealthResult(WorkerStatus.FAILED, f"{what} is gone (killed or crashed)")
