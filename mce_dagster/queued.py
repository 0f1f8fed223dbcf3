"""Evaluations submitted through the Dagster instance's run queue, for the REST API:
the runs are created from the code location as the UI creates them and handed to the
instance's run coordinator, so the daemon launches at most the instance's
`max_concurrent_runs` at once (and the pools bound their steps), whatever a request
asks for. Nothing is computed in the calling process.

A request is bounded before any run exists:

- in sessions: at most `engine.max_sessions_per_request` (mce_config.yaml), else
  `RequestTooLargeError`;
- in runs: one per range of adjacent session partitions (scattered sessions make many
  small runs); with the runs already waiting, at most `engine.max_queued_runs` may
  wait in the queue, else `QueueFullError` (HTTP 429; a request that could never fit
  is a `RequestTooLargeError`);
- in judge spend: the judge budget (MCE_JUDGE_BUDGET_USD) is the request's, shared by
  its runs in proportion to their sessions, and a judge call whose estimated cost
  would pass its run's share is not made.

On the local instance (the dagster.yaml `mce` writes) a `dagster-daemon` is started
when none is alive, as a child of this process; a deployment runs its own.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from . import evaluation as ev
from .defs.partitions import SESSIONS
from .errors import ConfigurationError, InputError, QueueFullError, RequestTooLargeError
from .graph import open_graph
from .settings import Settings

#: Runs that count as waiting in the queue: created and not yet launched.
WAITING = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED]
DAEMON_LOG = "dagster-daemon.log"

_lock = threading.Lock()
_workspace_file: Path | None = None
_runs = None  # instance.submission.CodeLocationRuns, once a run is submitted
_daemon = None  # instance.daemon.LocalDaemon


def use_workspace(path: Path | None) -> None:
    """Submit to the code location of this workspace file (the one the deployment's
    daemon loads) rather than the project's definitions module."""
    global _workspace_file
    if path is not None and not Path(path).is_file():
        raise ConfigurationError(f"--workspace {path}: no such file")
    _workspace_file = Path(path).resolve() if path is not None else None


def check_instance(instance: dg.DagsterInstance) -> None:
    """Refuse an instance whose runs would start at once, unbounded."""
    from .instance.submission import is_queued

    if not is_queued(instance):
        raise ConfigurationError(
            f"the Dagster instance's run coordinator is {type(instance.run_coordinator).__name__}: the REST API "
            "submits runs only to a queue (run_coordinator: QueuedRunCoordinator in dagster.yaml, with "
            "concurrency.runs.max_concurrent_runs), so that no request starts more runs than it allows"
        )


def waiting_runs(instance: dg.DagsterInstance) -> int:
    return instance.get_runs_count(filters=dg.RunsFilter(statuses=WAITING))


def queue_status(instance: dg.DagsterInstance) -> dict[str, Any]:
    """How the instance's run queue stands: whether there is one, its bound on runs at
    once, the runs waiting, and whether a daemon launches them."""
    from .instance.daemon import queue_daemon_alive
    from .instance.submission import is_queued, max_concurrent_runs

    if not is_queued(instance):
        return {"queued": False}
    return {
        "queued": True, "max_concurrent_runs": max_concurrent_runs(instance), "waiting": waiting_runs(instance),
        "daemon_alive": queue_daemon_alive(instance),
    }


def _started(instance: dg.DagsterInstance):
    """The code location's run factory and, on the local instance, the daemon."""
    global _runs, _daemon
    from .defs.assets import SESSION_CONTEXT_KEY
    from .instance.daemon import LocalDaemon
    from .instance.local import is_local_config
    from .instance.submission import CodeLocationRuns, CodeTarget

    target = CodeTarget(_workspace_file)
    if _runs is None:
        _runs = CodeLocationRuns(instance, target, SESSION_CONTEXT_KEY, ev.IMPLICIT_JOB)
        atexit.register(_close)
    if is_local_config(Settings.from_env().dagster_home):
        if _daemon is None:
            _daemon = LocalDaemon(target.daemon_arguments(), Settings.from_env().mce_home / "logs" / DAEMON_LOG)
        _daemon.ensure(instance)
    return _runs


def _close() -> None:
    global _runs, _daemon
    daemon, runs, _daemon, _runs = _daemon, _runs, None, None
    if daemon is not None:
        daemon.stop()
    if runs is not None:
        runs.close()


def submit(session_ids: Sequence[str], metrics: Sequence[str] | None = None) -> list[str]:
    """Queue the evaluation of the sessions (every enabled metric, or `metrics` with
    what they depend on): one run per range of adjacent partitions; their ids."""
    from .definitions import runtime
    from .runner import dagster_instance

    catalog, config = runtime()
    engine = config.engine
    ids = list(dict.fromkeys(session_ids))
    if len(ids) > engine.max_sessions_per_request:
        raise RequestTooLargeError(
            f"{len(ids)} sessions in one request; at most {engine.max_sessions_per_request} "
            f"(engine.max_sessions_per_request in {config.path}): split the request"
        )
    evaluation = ev.plan(config, metrics, catalog=catalog)  # an unknown name fails before anything is done
    if evaluation.population_metrics:
        names = ", ".join(str(m.key) for m in evaluation.population_metrics)
        raise InputError(
            f"metrics: {names} are population metrics, computed over every session of each app: `mce compute` "
            "runs them, a request for sessions does not"
        )
    ids = ev.stored_sessions(ids, open_graph())
    instance = dagster_instance()
    check_instance(instance)
    with _lock:
        # Counted on the order the partitions will have: new ones are added at the end.
        new = ev.unregistered(instance, ids)
        projected = [*instance.get_dynamic_partitions(SESSIONS), *new]
        needed = len(ev.session_runs(ids, projected, engine.batch_size))
        if needed > engine.max_queued_runs:
            raise RequestTooLargeError(
                f"these {len(ids)} sessions make {needed} runs (one per range of adjacent session partitions, at most "
                f"{engine.batch_size} sessions each), more than the queue takes: at most {engine.max_queued_runs} "
                f"waiting runs (engine.max_queued_runs in {config.path}); ask for fewer, or adjacent, sessions"
            )
        waiting = waiting_runs(instance)
        if waiting + needed > engine.max_queued_runs:
            raise QueueFullError(
                f"the run queue is full: {waiting} runs wait and this request needs {needed}, at most "
                f"{engine.max_queued_runs} may wait (engine.max_queued_runs in {config.path}); try again once some have run"
            )
        ordered = ev.register_sessions(instance, ids)
        batches = ev.session_runs(ids, ordered, engine.batch_size)
        budgets = ev.budget_shares(batches, Settings.from_env().judge.budget_usd if evaluation.judged else None)
        runs = _started(instance)
        return runs.submit(
            evaluation.asset_keys,
            [(ev.run_tags(batch), evaluation.run_config(budget)) for batch, budget in zip(batches, budgets)],
        )


def run_status(run_id: str) -> dict[str, Any] | None:
    """A run's status and the sessions it covers; None when the instance has no such run."""
    from .runner import dagster_instance

    instance = dagster_instance()
    run = instance.get_run_by_id(run_id)
    if run is None:
        return None
    sessions = ev.sessions_of_run(run.tags, instance.get_dynamic_partitions(SESSIONS))
    return {"run_id": run_id, "status": run.status.value, "done": run.is_finished, "sessions": sessions}
