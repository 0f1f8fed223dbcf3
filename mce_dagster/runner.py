"""Evaluations run by this process, for `mce compute` and the client: what is
evaluated (assets, sessions, runs, tags) is `mce_dagster.evaluation`'s; here the runs
execute in process, one after the other or in a pool of worker processes.

Runs are recorded in the Dagster instance under DAGSTER_HOME (default
`$MCE_HOME/dagster`), so `dagster dev` shows them with their lineage and metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from . import evaluation as ev
from .errors import ServiceError
from .graph import open_graph
from .instance.local import fail_runs_of_dead_processes, open_local_instance, run_tags, set_run_environment
from .settings import Settings


def default_dagster_home() -> Path:
    return Settings.from_env().dagster_home


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
    # Resolved before anything is registered: a typo changes nothing.
    evaluation = ev.plan(config, metrics, catalog=catalog)
    outcome.skipped_judged = list(evaluation.skipped)
    outcome.skip_reason = evaluation.skip_reason
    ids = ev.stored_sessions(ids, open_graph())
    instance = instance or dagster_instance()
    ordered = ev.register_sessions(instance, ids)

    judged = evaluation.judged
    set_run_environment()
    batches = ev.session_runs(ids, ordered, batch_size or config.engine.batch_size) if evaluation.needs_session_runs else []
    in_parallel = min(workers or config.engine.workers, len(batches))
    if budget_usd is not None and judged:
        in_parallel = 1  # each run's share of the budget is what the runs before it left
    try:
        for done in _run_batches(batches, evaluation, instance, raise_on_error, quiet, in_parallel, _budget_config(budget_usd, evaluation, outcome)):
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
    if evaluation.population_metrics:
        _compute_population(defs, evaluation, instance, outcome, raise_on_error, quiet)
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


def _budget_config(budget_usd: float | None, evaluation: ev.Evaluation, outcome: ComputeOutcome) -> Callable[[], float | None]:
    """The judge budget of the next run: what the runs before it left of `budget_usd`,
    one ceiling over every run of this call."""

    def remaining() -> float | None:
        if budget_usd is None or not evaluation.judged:
            return None
        return max(0.0, budget_usd - outcome.judge_cost)

    return remaining


def _execute_batch(
    instance: dg.DagsterInstance, asset_keys: Sequence[dg.AssetKey], batch: list[str], run_config: dict, raise_on_error: bool
) -> BatchOutcome:
    """One Dagster run over a contiguous batch of session partitions, in this process."""
    from .definitions import defs

    result = ev.execute_in_process(
        defs, asset_keys, instance=instance, tags={**ev.run_tags(batch), **run_tags()}, run_config=run_config, raise_on_error=raise_on_error
    )
    totals = ComputeOutcome()
    _count_failures(result, totals.failed_entities)
    _judge_totals(result, totals)
    return BatchOutcome(result.run_id, result.success, len(batch), totals.failed_entities, totals.judge_cost, totals.judge_calls)


def _run_batches(
    batches: list[list[str]],
    evaluation: ev.Evaluation,
    instance: dg.DagsterInstance,
    raise_on_error: bool,
    quiet: bool,
    workers: int,
    budget: Callable[[], float | None],
) -> Iterator[BatchOutcome]:
    """The batches' runs, in order: here one after the other, or `workers` at once in
    worker processes, each opening the same instance from its ref."""
    keys = evaluation.asset_keys
    ref = instance.get_ref() if workers > 1 and not instance.is_ephemeral else None
    if ref is None:
        for batch in batches:
            yield _execute_batch(instance, keys, batch, evaluation.run_config(budget(), quiet), raise_on_error)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    # spawn, not fork: the parent holds open connections and Dagster's threads.
    context = multiprocessing.get_context("spawn")
    before = set(multiprocessing.active_children())
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_open_worker_instance, initargs=(ref,)) as pool:
        futures = [
            pool.submit(_execute_in_worker, keys, batch, evaluation.run_config(budget(), quiet), raise_on_error) for batch in batches
        ]
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


def _execute_in_worker(asset_keys: Sequence[dg.AssetKey], batch: list[str], run_config: dict, raise_on_error: bool) -> BatchOutcome:
    assert _worker_instance is not None, "the worker's instance is opened by its initializer"
    return _execute_batch(_worker_instance, asset_keys, batch, run_config, raise_on_error)


def _compute_population(defs, evaluation: ev.Evaluation, instance, outcome: ComputeOutcome, raise_on_error: bool, quiet: bool) -> None:
    """One unpartitioned run over the population metrics, after the sessions' runs."""
    result = ev.execute_in_process(
        defs, evaluation.population_keys, instance=instance, tags=run_tags(), run_config=evaluation.run_config(quiet=quiet),
        raise_on_error=raise_on_error,
    )
    outcome.runs.append(result.run_id)
    if not result.success:
        outcome.failed_runs.append(result.run_id)
