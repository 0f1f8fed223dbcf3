"""`compute_sessions(workers=N)` (`mce compute --workers N`): runs in worker
processes on the local SQLite instance and the embedded graph store what runs in one
process store, the runs really overlap, failures are counted across workers, and a
worker killed midway is an error that names what happened, with its run failed."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import dagster as dg
import pytest

from mce_dagster.errors import ServiceError
from mce_dagster.ingest import ingest_paths
from mce_dagster.instance.local import prepare_local_instance
from mce_dagster.runner import compute_sessions
from mce_dagster.synthetic import write_export
from test_ingest import row

BATCH = 4
# What two evaluations of one session may differ in.
PER_RUN = {"computedAt", "runId"}


@pytest.fixture(scope="module")
def sessions(kg, tmp_path_factory):
    folder = tmp_path_factory.mktemp("workers")
    write_export(folder / "synthetic.json", 13, seed=5)
    # One session whose LLM call records no usage: TokenCount and Cost fail on it and on what sums it.
    (folder / "nousage.json").write_text(json.dumps([
        row("wk-wf", "a.workflow", session="wk-no-usage", duration_ns=3_000_000_000),
        row("wk-llm", "x.chat", parent="wk-wf", session="wk-no-usage", **{"gen_ai.request.model": "gpt-4o"}),
    ]))
    report = ingest_paths([folder / "synthetic.json", folder / "nousage.json"], kg)
    assert len(report.sessions) == 14
    return report.sessions


def local_instance(home) -> dg.DagsterInstance:
    prepare_local_instance(home)
    return dg.DagsterInstance.from_config(str(home))


def stored(kg, session_ids) -> dict[str, dict]:
    return {r["id"]: {k: v for k, v in r.items() if k not in PER_RUN} for r in kg.read_results(session_ids)}


def test_worker_processes_store_what_one_process_stores(kg, sessions, tmp_path):
    with local_instance(tmp_path / "parallel") as instance:
        parallel = compute_sessions(sessions, instance=instance, batch_size=BATCH, workers=2)
        after_parallel = stored(kg, sessions)
        runs = [instance.get_run_record_by_id(r) for r in parallel.runs]
        assert parallel.success and len(parallel.runs) == 4
        assert all(r.dagster_run.status == dg.DagsterRunStatus.SUCCESS for r in runs)
        # Its call records no usage: so do the MASCall and the Session that sum it.
        assert parallel.failed_entities == {
            f"{scope}/{name}": 1 for scope in ("LLMCall", "MASCall", "Session") for name in ("TokenCount", "Cost")
        }
        # Each session is a materialized partition of each metric asset, once.
        for key in (dg.AssetKey(["Session", "Duration"]), dg.AssetKey(["LLMCall", "TokenCount"])):
            assert instance.get_materialized_partitions(key) == set(sessions)
        # Two workers: some runs were in progress at the same time.
        spans = sorted((r.start_time, r.end_time) for r in runs)
        assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:])), spans
        # Every result was written by one of these runs.
        assert {r["runId"] for r in kg.read_results(sessions)} <= set(parallel.runs)

    with local_instance(tmp_path / "serial") as instance:
        serial = compute_sessions(sessions, instance=instance, batch_size=BATCH, workers=1)
        runs = [instance.get_run_record_by_id(r) for r in serial.runs]
        spans = sorted((r.start_time, r.end_time) for r in runs)
        assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:])), spans
    assert serial.failed_entities == parallel.failed_entities
    assert after_parallel and stored(kg, sessions) == after_parallel


def test_a_worker_killed_midway_is_an_error_and_its_run_is_failed(kg, sessions, tmp_path):
    outcome: dict = {}

    def evaluate() -> None:
        with local_instance(tmp_path / "killed") as instance:
            try:
                compute_sessions(sessions, instance=instance, batch_size=1, workers=2)
            except ServiceError as exc:
                outcome["error"] = exc
            outcome["runs"] = instance.get_run_records()

    thread = threading.Thread(target=evaluate)
    thread.start()
    victim = None
    deadline = time.monotonic() + 180
    with local_instance(tmp_path / "killed") as watcher:  # the same storage, read from here
        while victim is None and time.monotonic() < deadline and thread.is_alive():
            started = watcher.get_run_records(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
            if started:  # a worker is inside a run: kill that one
                victim = int(started[0].dagster_run.tags["mce/pid"])
                assert victim != os.getpid()
                os.kill(victim, signal.SIGKILL)
            time.sleep(0.1)
    thread.join(300)
    assert victim is not None, "no run was seen in progress"
    assert "error" in outcome, "killing a worker raised nothing"
    message = str(outcome["error"])
    assert "ended abruptly" in message and "marked failed" in message
    statuses = {r.dagster_run.status for r in outcome["runs"]}
    assert dg.DagsterRunStatus.STARTED not in statuses  # none left looking alive
    failed = [r for r in outcome["runs"] if r.dagster_run.status == dg.DagsterRunStatus.FAILURE]
    # The killed worker's run is failed (and named), and so may be the other's, interrupted.
    assert any(r.dagster_run.tags.get("mce/pid") == str(victim) for r in failed), [r.dagster_run.tags for r in failed]
    assert all(r.dagster_run.run_id in message for r in failed if r.dagster_run.tags.get("mce/pid") == str(victim))
    assert len(outcome["runs"]) < len(sessions)  # the runs not started were not started
    # No finished run is lost from the outcome, whichever worker ran it.
    succeeded = {r.dagster_run.run_id for r in outcome["runs"] if r.dagster_run.status == dg.DagsterRunStatus.SUCCESS}
    kept = outcome["error"].outcome
    assert kept is not None and succeeded <= set(kept.runs), (succeeded, kept)
    assert f"when {len(kept.runs)} of {len(sessions)} runs had finished" in message
