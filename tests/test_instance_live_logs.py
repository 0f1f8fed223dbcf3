"""The UI's live log view of a running run on the local default instance: a run worker
in its own process, and the watch on the run's event log that the webserver's log
subscription opens (`instance.watch_event_logs`, what dagster-graphql's
`gen_events_for_run` streams), sees the run's new events while the run is running."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import dagster as dg

from conftest import REPO
from mce_dagster.instance.local import EVENT_BATCH_SIZE, prepare_local_instance
from mce_dagster.instance.sqlite import PooledSqliteEventLogStorage

# A run of two partitioned assets over three sessions, in one run, as `mce` starts
# them; the second waits at two gates (files the test creates), so the run stays
# running until the test opens them, and the process stays after the run until the
# test lets it exit.
RUN_WAITING_AT_GATES = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import dagster as dg
    from mce_dagster.instance.local import open_local_instance

    home, gates = Path(sys.argv[1]), Path(sys.argv[2])

    def wait_for(name):
        deadline = time.monotonic() + 120
        while not (gates / name).exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the gate {name} was never opened")
            time.sleep(0.05)

    class Nowhere(dg.IOManager):
        def handle_output(self, context, obj):
            pass

        def load_input(self, context):
            return None

    parts = dg.DynamicPartitionsDefinition(name="sessions")
    single = dg.BackfillPolicy.single_run()

    @dg.asset(partitions_def=parts, backfill_policy=single, io_manager_key="nowhere")
    def first(context):
        return None

    @dg.asset(partitions_def=parts, backfill_policy=single, io_manager_key="nowhere", deps=[first])
    def second(context):
        context.log.info("second: waiting at gate 1")
        wait_for("1")
        context.log.info("second: through gate 1")
        wait_for("2")

    instance = open_local_instance(home)
    instance.add_dynamic_partitions("sessions", ["s1", "s2", "s3"])
    dg.materialize([first, second], instance=instance, resources={"nowhere": Nowhere()},
                   tags={"dagster/asset_partition_range_start": "s1", "dagster/asset_partition_range_end": "s3"})
    # The process stays, its connections open, until the test has seen the run end.
    wait_for("exit")
""")


def _wait(condition, timeout: float, what: str, worker: subprocess.Popen):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if worker.poll() is not None:
            raise AssertionError(f"the run worker exited ({worker.returncode}) before {what}: {worker.stderr.read()[-3000:]}")
        time.sleep(0.05)
    raise AssertionError(f"no {what} within {timeout} s")


def test_the_webservers_watch_sees_a_running_runs_new_events(tmp_path, monkeypatch):
    home, gates = tmp_path / "dagster", tmp_path / "gates"
    gates.mkdir()
    prepare_local_instance(home)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    env = {**os.environ, "DAGSTER_EVENT_BATCH_SIZE": EVENT_BATCH_SIZE, "MCE_HOME": str(tmp_path)}
    worker = subprocess.Popen(
        [sys.executable, "-c", RUN_WAITING_AT_GATES, str(home), str(gates)],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    instance = dg.DagsterInstance.from_config(str(home))  # the webserver's, in this process
    try:
        assert type(instance.event_log_storage) is PooledSqliteEventLogStorage
        run = _wait(lambda: next(iter(instance.get_runs()), None), 60, "run", worker)
        seen: list[dg.EventLogEntry] = []
        lock = threading.Lock()

        def on_event(event: dg.EventLogEntry, cursor: str) -> None:
            with lock:
                seen.append(event)

        # From the start of the run's log, as the UI's first page does.
        instance.watch_event_logs(run.run_id, None, on_event)

        def watched(test) -> bool:
            with lock:
                return any(test(e) for e in seen)

        def said(message: str) -> bool:
            return watched(lambda e: e.user_message == message)

        def materialized(asset: str) -> list[str]:
            with lock:
                return sorted(
                    e.dagster_event.partition for e in seen
                    if e.dagster_event_type == dg.DagsterEventType.ASSET_MATERIALIZATION
                    and e.dagster_event.asset_key == dg.AssetKey(asset)
                )

        def running() -> bool:
            return instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED

        _wait(lambda: said("second: waiting at gate 1"), 60, "the running step's first message seen", worker)
        assert materialized("first") == ["s1", "s2", "s3"] and running()
        # Each event the running step writes from here on is seen while it runs.
        (gates / "1").touch()
        _wait(lambda: said("second: through gate 1"), 30, "the running step's next message seen", worker)
        assert running() and not materialized("second")
        (gates / "2").touch()
        _wait(lambda: watched(lambda e: e.dagster_event_type == dg.DagsterEventType.RUN_SUCCESS), 30, "RUN_SUCCESS seen", worker)
        assert materialized("second") == ["s1", "s2", "s3"]
        (gates / "exit").touch()
        assert worker.wait(60) == 0, worker.stderr.read()[-3000:]
        # Each stored event seen, once.
        stored = [r.storage_id for r in instance.get_records_for_run(run.run_id, limit=10_000).records]
        with lock:
            assert len(seen) == len(stored)
        instance.end_watch_event_logs(run.run_id, on_event)
    finally:
        for name in ("1", "2", "exit"):
            (gates / name).touch()
        if worker.poll() is None:
            worker.kill()
            worker.wait(30)
        instance.dispose()
