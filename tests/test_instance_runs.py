"""Runs whose process died are not left running (issue 8): one killed with SIGKILL
midway is failed by the next `mce` use of the instance, and the run launcher lets the
monitoring daemon fail a daemon-launched run whose worker is gone."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import dagster as dg
import pytest
from dagster._core.events import DagsterEvent, DagsterEventType, EngineEventData
from dagster._core.events.log import EventLogEntry
from dagster._core.remote_origin import ManagedGrpcPythonEnvCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._daemon.monitoring.run_monitoring import monitor_started_run

from conftest import REPO
from mce_dagster.instance.launcher import MonitoredRunLauncher
from mce_dagster.instance.local import write_local_config
from mce_dagster.instance.processes import HOST_TAG, PID_TAG, this_process_tags

# Starts a run the way `mce compute` does (the runner's instance, run tags and
# environment), on two assets: the second hangs once the first is stored.
WORKER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import dagster as dg
    from mce_dagster.instance.local import run_tags, set_run_environment
    from mce_dagster.evaluation import RANGE_END, RANGE_START
    from mce_dagster.runner import dagster_instance

    ready = Path(sys.argv[1])
    parts = dg.DynamicPartitionsDefinition(name="sessions")

    @dg.asset(partitions_def=parts, backfill_policy=dg.BackfillPolicy.single_run())
    def first(context) -> dg.MaterializeResult:
        return dg.MaterializeResult()

    @dg.asset(partitions_def=parts, backfill_policy=dg.BackfillPolicy.single_run(), deps=[first])
    def second(context) -> dg.MaterializeResult:
        ready.write_text("hanging")
        time.sleep(600)
        return dg.MaterializeResult()

    instance = dagster_instance()
    instance.add_dynamic_partitions("sessions", ["k1", "k2"])
    set_run_environment()
    job = dg.Definitions(assets=[first, second], jobs=[dg.define_asset_job("hangs")]).resolve_job_def("hangs")
    job.execute_in_process(instance=instance, tags={RANGE_START: "k1", RANGE_END: "k2", **run_tags()})
""")


def statuses(instance: dg.DagsterInstance, asset: str) -> dict[str, str]:
    parts = dg.DynamicPartitionsDefinition(name="sessions")
    found = instance.get_status_by_partition(dg.AssetKey(asset), ["k1", "k2"], parts) or {}
    return {k: v.value for k, v in found.items() if v}


def test_a_run_killed_midway_is_failed_by_the_next_mce_use(tmp_path, monkeypatch):
    home = tmp_path / "dagster"
    ready = tmp_path / "ready"
    env = {**os.environ, "DAGSTER_HOME": str(home), "MCE_HOME": str(tmp_path / "mce")}
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(ready)], cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert worker.poll() is None, worker.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "the run never reached its second asset"
            time.sleep(0.1)
        os.kill(worker.pid, signal.SIGKILL)
        assert worker.wait(30) == -signal.SIGKILL
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()

    # Opened without mce: the run is left as the killed process left it.
    plain = dg.DagsterInstance.from_config(str(home))
    (run,) = plain.get_runs()
    assert run.status == dg.DagsterRunStatus.STARTED
    assert run.tags[PID_TAG] == str(worker.pid) and run.tags[HOST_TAG] == this_process_tags()[HOST_TAG]
    assert statuses(plain, "first") == {"k1": "MATERIALIZED", "k2": "MATERIALIZED"}
    assert statuses(plain, "second") == {"k1": "IN_PROGRESS", "k2": "IN_PROGRESS"}
    # What the monitoring daemon would ask the launcher about this run.
    health = MonitoredRunLauncher().check_run_worker_health(run)
    assert health.status.value == "FAILED", health

    from mce_dagster.runner import dagster_instance

    monkeypatch.setenv("DAGSTER_HOME", str(home))
    instance = dagster_instance()
    after = instance.get_run_by_id(run.run_id)
    assert after.status == dg.DagsterRunStatus.FAILURE
    failure = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    assert len(failure) == 1 and f"pid {worker.pid}" in failure[0].dagster_event.message
    assert statuses(instance, "second") == {"k1": "FAILED", "k2": "FAILED"}
    assert statuses(instance, "first") == {"k1": "MATERIALIZED", "k2": "MATERIALIZED"}
    # Once only: the next use finds nothing left to fail.
    dagster_instance()
    assert len(instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)) == 1


def test_runs_of_live_processes_are_left_alone(tmp_path, monkeypatch):
    from mce_dagster.runner import dagster_instance

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    instance = dagster_instance()
    mine = instance.create_run_for_job(_trivial_job(), tags=this_process_tags(), status=dg.DagsterRunStatus.STARTED)
    other_host = instance.create_run_for_job(_trivial_job(), tags={HOST_TAG: "elsewhere", PID_TAG: "1"}, status=dg.DagsterRunStatus.STARTED)
    dagster_instance()
    assert instance.get_run_by_id(mine.run_id).status == dg.DagsterRunStatus.STARTED
    assert instance.get_run_by_id(other_host.run_id).status == dg.DagsterRunStatus.STARTED
    assert MonitoredRunLauncher().check_run_worker_health(mine).status.value == "RUNNING"
    assert MonitoredRunLauncher().check_run_worker_health(other_host).status.value == "RUNNING"


def _trivial_job() -> dg.JobDefinition:
    @dg.op
    def nothing() -> None:
        return None

    @dg.job
    def trivial() -> None:
        nothing()

    return trivial


def _daemon_launched_run(instance: dg.DagsterInstance, worker_pid: int, logged_at: float | None = None) -> dg.DagsterRun:
    """A STARTED run as the daemon's launcher leaves it: launched through a code server
    this deployment started (workspace.yaml's python_module), whose run worker logged
    its pid."""
    location = ManagedGrpcPythonEnvCodeLocationOrigin(
        loadable_target_origin=LoadableTargetOrigin(executable_path=sys.executable, module_name="mce_dagster.definitions"),
        location_name="mce_dagster",
    )
    origin = RemoteJobOrigin(repository_origin=RemoteRepositoryOrigin(location, "__repository__"), job_name="trivial")
    run = instance.create_run_for_job(_trivial_job(), remote_job_origin=origin, status=dg.DagsterRunStatus.STARTED)
    event = DagsterEvent(
        event_type_value=DagsterEventType.ENGINE_EVENT.value,
        job_name=run.job_name,
        message=f"Started process for run (pid: {worker_pid}).",
        event_specific_data=EngineEventData.in_process(worker_pid),
    )
    instance.handle_new_event(EventLogEntry(
        error_info=None, level=logging.DEBUG, user_message="", run_id=run.run_id,
        timestamp=logged_at or time.time(), dagster_event=event, job_name=run.job_name,
    ))
    return instance.get_run_by_id(run.run_id)


def test_the_monitoring_daemon_fails_a_daemon_launched_run_whose_worker_is_gone(tmp_path):
    write_local_config(tmp_path)
    instance = dg.DagsterInstance.from_config(str(tmp_path))
    assert isinstance(instance.run_launcher, MonitoredRunLauncher) and instance.run_monitoring_enabled
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = _daemon_launched_run(instance, gone.pid)
    alive = _daemon_launched_run(instance, os.getpid())
    logger = logging.getLogger("test-run-monitoring")
    for run in (dead, alive):
        monitor_started_run(instance, None, instance.get_run_record_by_id(run.run_id), logger)
    assert instance.get_run_by_id(dead.run_id).status == dg.DagsterRunStatus.FAILURE
    assert instance.get_run_by_id(alive.run_id).status == dg.DagsterRunStatus.STARTED
    (failure,) = instance.all_logs(dead.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    assert f"run worker process {gone.pid} is gone" in failure.dagster_event.message


def test_a_reused_pid_is_not_taken_for_the_worker(tmp_path):
    if not os.path.exists(f"/proc/{os.getpid()}/stat"):
        pytest.skip("no /proc: process start times are unknown here")
    write_local_config(tmp_path)
    instance = dg.DagsterInstance.from_config(str(tmp_path))
    # The pid runs, but its process started an hour after the worker logged that pid.
    newer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        run = _daemon_launched_run(instance, newer.pid, logged_at=time.time() - 3600)
        assert instance.run_launcher.check_run_worker_health(run).status.value == "FAILED"
        run = _daemon_launched_run(instance, newer.pid)
        assert instance.run_launcher.check_run_worker_health(run).status.value == "RUNNING"
    finally:
        newer.kill()
        newer.wait()
