"""Evaluations submitted as Dagster runs through the instance, for the REST API: the
web process creates the runs (so their ids exist, and show in `dagster dev`, at
once) and starts one worker process per run to execute it; nothing is computed in
the web process.

    python -m mce_dagster.serve.runs RUN_ID   # the worker: executes one created run
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import dagster as dg

from ..graph import open_graph
from ..settings import Settings

DEFINITIONS_MODULE = "mce_dagster.definitions"
IMPLICIT_JOB = "__ASSET_JOB"
LOG_DIR = "api_runs"
# Workers this process started, so a worker that died before its run started is
# reported (its run failed, with the end of its log) rather than waited for forever.
_WORKERS: dict[str, subprocess.Popen] = {}


def _repository():
    from dagster._core.definitions.reconstruct import ReconstructableRepository

    return ReconstructableRepository.for_module(DEFINITIONS_MODULE, "defs")


def submit(session_ids: Sequence[str], metrics: Sequence[str] | None = None) -> list[str]:
    """Create one run per contiguous batch of sessions and start its worker; the run ids."""
    from ..defs.assets import SESSION_CONTEXT_KEY, asset_key
    from ..defs.jobs import EVALUATE_JOB
    from ..defs.partitions import SESSIONS
    from ..definitions import defs, runtime
    from ..runner import QUIET_RUN_CONFIG, RANGE_END, RANGE_START, contiguous_ranges, dagster_instance

    catalog, config = runtime()
    ids = list(dict.fromkeys(session_ids))
    selection = None
    if metrics:
        keys = [m.key for name in metrics for m in catalog.resolve(name)]
        selection = {SESSION_CONTEXT_KEY, *(asset_key(m.key) for m in catalog.closure(keys))}
    # A raw platform id (`<app>_<uuid>`) names the session stored under its uuid.
    graph = open_graph()
    stored = graph.resolve_sessions(ids)
    absent = [k for k in ids if k not in stored]
    if absent:
        raise graph.unknown_sessions_error(absent)
    ids = list(dict.fromkeys(stored[k] for k in ids))
    instance = dagster_instance()
    existing = set(instance.get_dynamic_partitions(SESSIONS))
    new = [k for k in ids if k not in existing]
    if new:
        instance.add_dynamic_partitions(SESSIONS, new)
    ordered = instance.get_dynamic_partitions(SESSIONS)
    repository = _repository()
    if selection is None:
        job_def, recon = defs.resolve_job_def(EVALUATE_JOB), repository.get_reconstructable_job(EVALUATE_JOB)
    else:
        job_def = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=selection)
        recon = repository.get_reconstructable_job(IMPLICIT_JOB).get_subset(asset_selection=selection)
    run_ids = []
    logs = Settings.from_env().mce_home / LOG_DIR
    logs.mkdir(parents=True, exist_ok=True)
    for batch in contiguous_ranges(ids, ordered, config.engine.batch_size):
        run = instance.create_run_for_job(
            job_def=job_def,
            run_config=QUIET_RUN_CONFIG,
            tags={RANGE_START: batch[0], RANGE_END: batch[-1]},
            asset_selection=frozenset(selection) if selection else None,
            job_code_origin=recon.get_python_origin(),
            status=dg.DagsterRunStatus.NOT_STARTED,
        )
        with open(logs / f"{run.run_id}.log", "ab") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "mce_dagster.serve.runs", run.run_id],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            )
        _WORKERS[run.run_id] = worker
        run_ids.append(run.run_id)
    return run_ids


def sessions_of(run: Any, instance: dg.DagsterInstance) -> list[str]:
    from ..defs.partitions import SESSIONS
    from ..runner import RANGE_END, RANGE_START

    start, end = run.tags.get(RANGE_START), run.tags.get(RANGE_END)
    keys = instance.get_dynamic_partitions(SESSIONS)
    if start not in keys or end not in keys:
        return []
    return keys[keys.index(start) : keys.index(end) + 1]


def report(run_id: str) -> dict[str, Any] | None:
    """Status of one run and, once it is done, the results of its sessions; None when
    the instance has no such run."""
    from ..runner import dagster_instance
    from .. import service

    instance = dagster_instance()
    run = instance.get_run_by_id(run_id)
    if run is None:
        return None
    worker = _WORKERS.get(run_id)
    if run.status == dg.DagsterRunStatus.NOT_STARTED and worker is not None and worker.poll() is not None:
        log = Settings.from_env().mce_home / LOG_DIR / f"{run_id}.log"
        tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
        instance.report_run_failed(run, f"the worker process exited ({worker.returncode}) before the run started:\n{tail}")
        run = instance.get_run_by_id(run_id)
    sessions = sessions_of(run, instance)
    out: dict[str, Any] = {"run_id": run_id, "status": run.status.value, "done": run.is_finished, "sessions": sessions}
    if run.is_finished:
        out["results"] = [r for sid in sessions for r in service.results(sid)]
    return out


def execute(run_id: str) -> int:
    """The worker: execute a run the web process created."""
    from dagster._utils.hosted_user_process import recon_job_from_origin
    from dagster._core.execution.api import execute_run

    from ..runner import dagster_instance

    instance = dagster_instance()
    run = instance.get_run_by_id(run_id)
    if run is None or run.status != dg.DagsterRunStatus.NOT_STARTED:
        return 1
    recon = recon_job_from_origin(run.job_code_origin)
    if run.asset_selection:
        recon = recon.get_subset(asset_selection=run.asset_selection)
    result = execute_run(recon, run, instance)
    return 0 if result.success else 1


if __name__ == "__main__":
    from ..files import keep_private

    keep_private()
    sys.exit(execute(sys.argv[1]))
