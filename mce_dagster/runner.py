"""Evaluating sessions through the Dagster definitions, for the CLI and the client.

Runs are recorded in the Dagster instance under DAGSTER_HOME (default
`$MCE_HOME/dagster`), so `dagster dev` shows them with their lineage and metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from .core.ontology import Scope
from .defs.partitions import SESSIONS
from .errors import ServiceError
from .graph import open_graph
from .instance.local import (  # noqa: F401
    LOCAL_INSTANCE_YAML,
    fail_runs_of_dead_processes,
    open_local_instance,
    run_tags,
    set_run_environment,
)
from .settings import Settings

RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
# How many sessions a run covers (RANGE_START/RANGE_END name the first and last).
SESSIONS_TAG = "mce/sessions"


def default_dagster_home() -> Path:
    return Settings.from_env().dagster_home


# Dagster's console logger prints every event at DEBUG; the CLI shows warnings.
QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def dagster_instance() -> dg.DagsterInstance:
    """The instance under DAGSTER_HOME: its dagster.yaml written or upgraded, runs
    whose process died marked failed."""
    return open_local_instance(default_dagster_home())


@dataclass
class ComputeOutcome:
    runs: list[str] = field(default_factory=list)
    failed_runs: list[str] = field(default_factory=list)
    sessions: int = 0
    # Metric asset -> entities it failed on (nothing is stored for those).
    failed_entities: dict[str, int] = field(default_factory=dict)
    # Judged metrics left out because no judge model is configured, and why.
    skipped_judged: list[str] = field(default_factory=list)
    skip_reason: str | None = None
    # What the judge cost over all runs (USD), from the assets' metadata.
    judge_cost: float = 0.0
    judge_calls: int = 0

    @property
    def success(self) -> bool:
        return not self.failed_runs


def contiguous_ranges(wanted: Sequence[str], ordered_keys: Sequence[str], batch_size: int) -> list[list[str]]:
    """Split the wanted keys into runs of keys that are adjacent in partition order
    (a run covers a partition range), at most `batch_size` each."""
    position = {k: i for i, k in enumerate(ordered_keys)}
    ranges: list[list[str]] = []
    for key in sorted(set(wanted), key=position.__getitem__):
        if ranges and position[key] == position[ranges[-1][-1]] + 1 and len(ranges[-1]) < batch_size:
            ranges[-1].append(key)
        else:
            ranges.append([key])
    return ranges


def _count_failures(result: dg.ExecuteInProcessResult, into: dict[str, int]) -> None:
    # A batch's materializations share the asset's output metadata: count it once.
    seen: set[dg.AssetKey] = set()
    for event in result.get_asset_materialization_events():
        key = event.asset_key
        if key in seen:
            continue
        seen.add(key)
        failed = event.event_specific_data.materialization.metadata.get("failed")
        if failed is not None and failed.value:
            name = key.to_user_string()
            into[name] = into.get(name, 0) + int(failed.value)


def _judge_totals(result: dg.ExecuteInProcessResult, outcome: "ComputeOutcome") -> None:
    seen: set[dg.AssetKey] = set()
    for event in result.get_asset_materialization_events():
        if event.asset_key in seen:
            continue
        seen.add(event.asset_key)
        metadata = event.event_specific_data.materialization.metadata
        if "judge cost (USD)" in metadata:
            outcome.judge_cost += float(metadata["judge cost (USD)"].value)
            outcome.judge_calls += int(metadata["judge calls"].value)


def _is_judged(metric) -> bool:
    return metric.definition.kind == "llm_judge"


def compute_sessions(
    session_ids: Iterable[str],
    metrics: Sequence[str] | None = None,
    *,
    instance: dg.DagsterInstance | None = None,
    batch_size: int | None = None,
    raise_on_error: bool = False,
    quiet: bool = True,
    budget_usd: float | None = None,
    on_run: Callable[[int], None] | None = None,
    workers: int | None = None,
) -> ComputeOutcome:
    """Evaluate the enabled metrics (or `metrics`, with what they depend on) on the
    given sessions, one Dagster run per contiguous batch. `on_run(n)` is told each
    finished run's number of sessions (a progress bar). `workers` (default: the
    engine's `workers` setting): how many runs go at once, each in a process of its
    own on the same instance and graph; one runs them in this process."""
    from .definitions import defs, runtime

    catalog, config = runtime()
    ids = list(dict.fromkeys(session_ids))
    outcome = ComputeOutcome(sessions=len(ids))
    if not ids:
        return outcome
    selection = None
    if metrics:  # resolved before anything is registered: a typo changes nothing
        from .defs.assets import SESSION_CONTEXT_KEY, asset_key

        keys = [m.key for name in metrics for m in catalog.resolve(name)]
        selected = catalog.closure(keys)
        selection = [SESSION_CONTEXT_KEY, *(asset_key(m.key) for m in selected if m.scope is not Scope.POPULATION)]
    else:
        selected = list(config.enabled)
        if not Settings.from_env().judge.configured:
            # Not asked for by name: judged metrics (and what reads them) are skipped.
            from .core.metrics.judged import NO_JUDGE
            from .defs.assets import SESSION_CONTEXT_KEY, asset_key

            dropped: set = set()
            for m in config.enabled:  # dependencies first
                if _is_judged(m) or any(dep in dropped for dep in m.dependencies):
                    dropped.add(m.key)
            if dropped:
                outcome.skipped_judged = sorted(str(k) for k in dropped)
                outcome.skip_reason = NO_JUDGE
                selected = [m for m in config.enabled if m.key not in dropped]
                selection = [SESSION_CONTEXT_KEY, *(asset_key(m.key) for m in selected if m.scope is not Scope.POPULATION)]
    # A raw platform id (`<app>_<uuid>`) names the session stored under its uuid.
    graph = open_graph()
    stored = graph.resolve_sessions(ids)
    absent = [k for k in ids if k not in stored]
    if absent:
        raise graph.unknown_sessions_error(absent)
    ids = list(dict.fromkeys(stored[k] for k in ids))
    instance = instance or dagster_instance()
    existing = set(instance.get_dynamic_partitions(SESSIONS))
    new = [k for k in ids if k not in existing]
    if new:
        instance.add_dynamic_partitions(SESSIONS, new)
    ordered = instance.get_dynamic_partitions(SESSIONS)

    judged = [m for m in selected if _is_judged(m)]
    if budget_usd is not None and judged and selection is None:
        from .defs.assets import SESSION_CONTEXT_KEY, asset_key

        selection = [SESSION_CONTEXT_KEY, *(asset_key(m.key) for m in selected if m.scope is not Scope.POPULATION)]
    set_run_environment()
    size = batch_size or config.engine.batch_size
    population = [m for m in selected if m.scope is Scope.POPULATION]
    # Population metrics alone need no session run: they read the graph themselves.
    batches = contiguous_ranges(ids, ordered, size) if len(population) < len(selected) else []
    in_parallel = min(workers or config.engine.workers, len(batches))
    if budget_usd is not None and judged:
        in_parallel = 1  # each run's share of the budget is what the runs before it left
    try:
        for done in _run_batches(batches, selection, instance, raise_on_error, quiet, in_parallel, _budget_config(budget_usd, judged, outcome)):
            outcome.runs.append(done.run_id)
            for name, n in done.failed_entities.items():
                outcome.failed_entities[name] = outcome.failed_entities.get(name, 0) + n
            outcome.judge_cost += done.judge_cost
            outcome.judge_calls += done.judge_calls
            if not done.success:
                outcome.failed_runs.append(done.run_id)
            if on_run:
                on_run(done.sessions)
    except WorkerDiedError as exc:
        exc.outcome = outcome  # the runs that finished: their results are stored
        raise
    if population:
        _compute_population(defs, population, instance, outcome, raise_on_error, quiet)
    return outcome


class WorkerDiedError(ServiceError):
    """A worker process died inside a run. `outcome`: what the runs that finished
    before it (in any worker) did."""

    outcome: ComputeOutcome | None = None


@dataclass
class BatchOutcome:
    """What `compute_sessions` keeps of one run (picklable: it may come from a worker)."""

    run_id: str
    success: bool
    sessions: int
    failed_entities: dict[str, int] = field(default_factory=dict)
    judge_cost: float = 0.0
    judge_calls: int = 0


def _budget_config(budget_usd: float | None, judged: list, outcome: ComputeOutcome) -> Callable[[], dict]:
    """Run config of the next run: the judged metrics' share of the budget."""

    def ops() -> dict:
        if budget_usd is None or not judged:
            return {}
        from .defs.assets import asset_key

        # One ceiling over every run of this call: each run gets what is left.
        remaining = max(0.0, budget_usd - outcome.judge_cost)
        return {asset_key(m.key).to_python_identifier(): {"config": {"budget_usd": remaining}} for m in judged}

    return ops


def _execute_batch(
    instance: dg.DagsterInstance, selection: list | None, batch: list[str], ops: dict, raise_on_error: bool, quiet: bool
) -> BatchOutcome:
    """One Dagster run over a contiguous batch of session partitions."""
    from .defs.jobs import EVALUATE_JOB
    from .definitions import defs

    tags = {RANGE_START: batch[0], RANGE_END: batch[-1], SESSIONS_TAG: str(len(batch)), **run_tags()}
    run_config = {**(QUIET_RUN_CONFIG if quiet else {}), **({"ops": ops} if ops else {})} or None
    if selection is None:
        result = defs.resolve_job_def(EVALUATE_JOB).execute_in_process(
            instance=instance, tags=tags, raise_on_error=raise_on_error, run_config=run_config
        )
    else:
        result = dg.materialize(
            assets=list(defs.assets or []),
            selection=selection,
            resources=defs.resources,
            instance=instance,
            tags=tags,
            raise_on_error=raise_on_error,
            run_config=run_config,
        )
    totals = ComputeOutcome()
    _count_failures(result, totals.failed_entities)
    _judge_totals(result, totals)
    return BatchOutcome(result.run_id, result.success, len(batch), totals.failed_entities, totals.judge_cost, totals.judge_calls)


def _run_batches(
    batches: list[list[str]],
    selection: list | None,
    instance: dg.DagsterInstance,
    raise_on_error: bool,
    quiet: bool,
    workers: int,
    ops: Callable[[], dict],
) -> Iterator[BatchOutcome]:
    """The batches' runs, in order: here one after the other, or `workers` at once in
    worker processes, each opening the same instance from its ref."""
    ref = instance.get_ref() if workers > 1 and not instance.is_ephemeral else None
    if ref is None:
        for batch in batches:
            yield _execute_batch(instance, selection, batch, ops(), raise_on_error, quiet)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    # spawn, not fork: the parent holds open connections and Dagster's threads.
    context = multiprocessing.get_context("spawn")
    before = set(multiprocessing.active_children())
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_open_worker_instance, initargs=(ref,)) as pool:
        futures = [pool.submit(_execute_in_worker, selection, batch, ops(), raise_on_error, quiet) for batch in batches]
        finished = 0
        try:
            for future in futures:
                yield future.result()
                finished += 1
        except BrokenProcessPool:
            # The pool interrupts the other workers' runs (Dagster marks them failed)
            # and then waits for workers that an interrupted run leaves waiting for
            # more work: end them, so that nothing waits forever.
            for worker in set(multiprocessing.active_children()) - before:
                worker.kill()
            pool.shutdown(wait=True, cancel_futures=True)
            # Runs that ended before the failure, behind it in the queue: theirs too.
            for future in futures[finished:]:
                if future.done() and not future.cancelled() and future.exception() is None:
                    yield future.result()
                    finished += 1
            failed = fail_runs_of_dead_processes(instance)
            raise WorkerDiedError(
                f"a worker process of this evaluation ended abruptly (killed, or out of memory) when {finished} of "
                f"{len(batches)} runs had finished; the runs in progress are marked failed "
                f"({', '.join(failed) or 'none was left unfinished'}); running the command again evaluates the sessions anew"
            ) from None
        finally:
            for future in futures:  # those not started yet; the running ones finish
                future.cancel()


_worker_instance: dg.DagsterInstance | None = None


def _open_worker_instance(ref) -> None:
    global _worker_instance
    _worker_instance = dg.DagsterInstance.from_ref(ref)


def _execute_in_worker(selection: list | None, batch: list[str], ops: dict, raise_on_error: bool, quiet: bool) -> BatchOutcome:
    assert _worker_instance is not None, "the worker's instance is opened by its initializer"
    return _execute_batch(_worker_instance, selection, batch, ops, raise_on_error, quiet)


def _compute_population(defs, metrics, instance, outcome: ComputeOutcome, raise_on_error: bool, quiet: bool) -> None:
    """One unpartitioned run over the population metrics, after the sessions' runs."""
    from .defs.assets import asset_key

    result = dg.materialize(
        assets=list(defs.assets or []),
        selection=[asset_key(m.key) for m in metrics],
        resources=defs.resources,
        instance=instance,
        tags=run_tags(),
        raise_on_error=raise_on_error,
        run_config=dict(QUIET_RUN_CONFIG) if quiet else None,
    )
    outcome.runs.append(result.run_id)
    if not result.success:
        outcome.failed_runs.append(result.run_id)
