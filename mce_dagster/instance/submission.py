"""Runs created from a code location and handed to the instance's run coordinator,
as the Dagster UI creates and submits them: the run carries the job's snapshots and
both origins, so the daemon's launcher finds the code location by name and runs the
run's asset selection there.

The process that submits holds the code location itself (a gRPC code server of its
own, for a Python module, as the webserver does); with a QueuedRunCoordinator the run
waits in the queue until the daemon launches it.

Dagster's public API submits a job only through the GraphQL of a running webserver,
or `dagster job launch`, which cannot select assets. What this relies on, to check
on an upgrade (tests/test_api.py and tests/test_eval_path.py submit through it):

- `WorkspaceProcessContext` with a `ModuleTarget` or `WorkspaceFileTarget`
  (dagster._core.workspace.context, .load_target): the code location, loaded as the
  webserver loads it;
- `JobSubsetSelector` (dagster._core.definitions.selector), `CodeLocation.get_job`
  and `.get_execution_plan`, then `DagsterInstance.create_run` with the remote job's
  snapshots, origins and asset graph: a run as `dagster job launch` and the sensor
  daemon create one (dagster/_cli/job.py `_create_run`, dagster/_daemon/sensor.py
  `_create_sensor_run`);
- `DagsterInstance.submit_run(run_id, request_context)`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
from dagster._core.definitions.selector import JobSubsetSelector
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import ModuleTarget, WorkspaceFileTarget

#: The code location `mce` serves by default: the module workspace.yaml loads.
DEFINITIONS_MODULE = "mce_dagster.definitions"
DEFINITIONS_ATTRIBUTE = "defs"


@dataclass(frozen=True)
class CodeTarget:
    """Where the code location is: a workspace file (what the daemon of a deployment
    loads), or else the project's definitions module."""

    workspace_file: Path | None = None

    def load_target(self):
        if self.workspace_file is not None:
            return WorkspaceFileTarget(paths=[str(self.workspace_file)])
        return ModuleTarget(module_name=DEFINITIONS_MODULE, attribute=DEFINITIONS_ATTRIBUTE, working_directory=None, location_name=None)

    def daemon_arguments(self) -> list[str]:
        """The same code location, as `dagster-daemon run` takes it."""
        if self.workspace_file is not None:
            return ["-w", str(self.workspace_file)]
        return ["-m", DEFINITIONS_MODULE, "-a", DEFINITIONS_ATTRIBUTE]


def is_queued(instance: dg.DagsterInstance) -> bool:
    """Whether submitted runs wait in a queue (a daemon launches them, a bounded
    number at once) rather than start at once."""
    return isinstance(instance.run_coordinator, dg.QueuedRunCoordinator)


def max_concurrent_runs(instance: dg.DagsterInstance) -> int:
    """The queue's bound on runs in progress at once (-1: none)."""
    return instance.get_concurrency_config().run_queue_config.max_concurrent_runs


class CodeLocationRuns:
    """Creates and submits runs of the asset job of the code location that holds
    `probe` (an asset key every evaluation selects)."""

    def __init__(self, instance: dg.DagsterInstance, target: CodeTarget, probe: dg.AssetKey, job_name: str):
        self.instance = instance
        self.target = target
        self._probe = probe
        self._job_name = job_name
        self._context = WorkspaceProcessContext(instance, target.load_target())
        self._lock = threading.Lock()

    def close(self) -> None:
        self._context.__exit__(None, None, None)

    def _location(self, request):
        errors = []
        for entry in request.get_code_location_entries().values():
            if entry.code_location is None:
                errors.append(f"{entry.origin.location_name}: {entry.load_error.message if entry.load_error else 'not loaded'}")
                continue
            for repository in entry.code_location.get_repositories().values():
                if repository.asset_graph.has(self._probe):
                    return entry.code_location, repository
        detail = "; ".join(errors) or "none of its code locations defines it"
        raise LookupError(f"the code location of {self.target.load_target()} holds no asset {self._probe.to_user_string()}: {detail}")

    def submit(
        self, asset_keys: Sequence[dg.AssetKey], runs: Sequence[tuple[Mapping[str, str], Mapping]]
    ) -> list[str]:
        """One run per (tags, run config) of `runs`, each materializing `asset_keys`
        (with their checks), created and submitted in order; their ids."""
        with self._lock:
            request = self._context.create_request_context()
            location, repository = self._location(request)
            selector = JobSubsetSelector(
                location_name=location.name, repository_name=repository.name, job_name=self._job_name,
                op_selection=None, asset_selection=list(asset_keys),
            )
            remote_job = location.get_job(selector)
            plans: dict[str, object] = {}
            run_ids = []
            for tags, run_config in runs:
                key = json.dumps(run_config, sort_keys=True)
                if key not in plans:
                    plans[key] = location.get_execution_plan(
                        remote_job, dict(run_config), step_keys_to_execute=None, known_state=None, instance=self.instance
                    ).execution_plan_snapshot
                run = self.instance.create_run(
                    job_name=remote_job.name,
                    run_id=None,
                    run_config=dict(run_config),
                    resolved_op_selection=remote_job.resolved_op_selection,
                    step_keys_to_execute=None,
                    status=dg.DagsterRunStatus.NOT_STARTED,
                    op_selection=None,
                    root_run_id=None,
                    parent_run_id=None,
                    tags={**(remote_job.run_tags or {}), **tags},
                    job_snapshot=remote_job.job_snapshot,
                    execution_plan_snapshot=plans[key],
                    parent_job_snapshot=remote_job.parent_job_snapshot,
                    remote_job_origin=remote_job.get_remote_origin(),
                    job_code_origin=remote_job.get_python_origin(),
                    asset_selection=remote_job.asset_selection or frozenset(asset_keys),
                    asset_check_selection=remote_job.asset_check_selection,
                    asset_graph=repository.asset_graph,
                )
                self.instance.submit_run(run.run_id, request)
                run_ids.append(run.run_id)
            return run_ids
