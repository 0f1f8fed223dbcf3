"""What one evaluation is, whoever starts it: `mce compute` and the Python client
(runs executed here, `runner`), the REST API (runs submitted through the instance's
queue, `queued`), and the sensors (a backfill the daemon runs).

- The assets: the metrics named, with what they depend on, or else every enabled
  metric. When none is named and no judge model is configured, the judged metrics
  and whatever reads them are left out (`Evaluation.skipped`), so their partitions
  stay unmaterialized until a judge is configured. A session run materializes the
  session context and the metrics of the per-session scopes; population metrics are
  unpartitioned and run apart, after the sessions.
- The sessions: a raw platform id (`<app>_<uuid>`) names the session the graph stores
  under its bare id; each session is a partition of `sessions`, registered before a
  run covers it.
- The runs: one per range of adjacent partitions (a run covers a partition range), at
  most `engine.batch_size` sessions each, tagged with the range and its size.
- The judge: a run's judged assets share the budget the run is given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import dagster as dg

from .catalog import Catalog, CatalogMetric
from .config import MCEConfig
from .core.ontology import Scope
from .defs.assets import SESSION_CONTEXT_KEY, asset_key
from .defs.partitions import SESSIONS
from .graph import KnowledgeGraph

RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
# How many sessions a run covers (RANGE_START/RANGE_END name the first and last).
SESSIONS_TAG = "mce/sessions"
# Dagster's name for the job of every asset of a code location: an evaluation runs
# the part of it its assets select.
IMPLICIT_JOB = "__ASSET_JOB"
# Dagster's console logger prints every event at DEBUG; the CLI shows warnings.
QUIET_RUN_CONFIG: Mapping = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def is_judged(metric: CatalogMetric) -> bool:
    return metric.definition.kind == "llm_judge"


@dataclass(frozen=True)
class Evaluation:
    """The metrics one evaluation computes, dependencies first."""

    metrics: tuple[CatalogMetric, ...]
    # Judged metrics (and what reads them) left out because no judge is configured.
    skipped: tuple[str, ...] = ()
    skip_reason: str | None = None

    @property
    def session_metrics(self) -> list[CatalogMetric]:
        return [m for m in self.metrics if m.scope is not Scope.POPULATION]

    @property
    def population_metrics(self) -> list[CatalogMetric]:
        return [m for m in self.metrics if m.scope is Scope.POPULATION]

    @property
    def judged(self) -> list[CatalogMetric]:
        return [m for m in self.metrics if is_judged(m)]

    @property
    def asset_keys(self) -> tuple[dg.AssetKey, ...]:
        """What a session run materializes: the sessions' context and the metrics."""
        return (SESSION_CONTEXT_KEY, *(asset_key(m.key) for m in self.session_metrics))

    @property
    def population_keys(self) -> tuple[dg.AssetKey, ...]:
        return tuple(asset_key(m.key) for m in self.population_metrics)

    @property
    def needs_session_runs(self) -> bool:
        # Population metrics alone need no session run: they read the graph themselves.
        return bool(self.session_metrics)

    def budget_config(self, budget_usd: float | None) -> dict:
        """The `ops` run config that gives a run's judged assets `budget_usd`."""
        if budget_usd is None:
            return {}
        return {asset_key(m.key).to_python_identifier(): {"config": {"budget_usd": budget_usd}} for m in self.judged}

    def run_config(self, budget_usd: float | None = None, quiet: bool = True) -> dict:
        ops = self.budget_config(budget_usd)
        return {**(QUIET_RUN_CONFIG if quiet else {}), **({"ops": ops} if ops else {})}


def enabled(config: MCEConfig) -> Evaluation:
    """Every enabled metric, judged or not: what the `evaluate_sessions` job runs."""
    return Evaluation(tuple(config.enabled))


def plan(
    config: MCEConfig,
    metrics: Sequence[str] | None = None,
    *,
    catalog: Catalog | None = None,
    judge_configured: bool | None = None,
) -> Evaluation:
    """The evaluation of `metrics` (names as `mce compute --metrics` takes them, with
    what they depend on; `catalog` resolves them), or of every enabled metric, with
    the judged ones left out when no judge is configured (`judge_configured`: from
    the settings when not given). An unknown name raises before anything is done."""
    if metrics:
        if catalog is None:
            raise ValueError("naming metrics needs the catalog that resolves them")
        keys = [m.key for name in metrics for m in catalog.resolve(name)]
        return Evaluation(tuple(catalog.closure(keys)))
    if judge_configured is None:
        from .settings import Settings

        judge_configured = Settings.from_env().judge.configured
    if judge_configured:
        return enabled(config)
    from .core.metrics.judged import NO_JUDGE

    dropped: set = set()
    for m in config.enabled:  # dependencies first
        if is_judged(m) or any(dep in dropped for dep in m.dependencies):
            dropped.add(m.key)
    if not dropped:
        return enabled(config)
    kept = tuple(m for m in config.enabled if m.key not in dropped)
    return Evaluation(kept, tuple(sorted(str(k) for k in dropped)), NO_JUDGE)


# -- the sessions and their runs -------------------------------------------------------


def stored_sessions(session_ids: Iterable[str], graph: KnowledgeGraph) -> list[str]:
    """The ids the graph stores the sessions under, each once, in the order given;
    UnknownSessionError naming those it does not hold."""
    ids = list(dict.fromkeys(session_ids))
    stored = graph.resolve_sessions(ids)
    absent = [k for k in ids if k not in stored]
    if absent:
        raise graph.unknown_sessions_error(absent)
    return list(dict.fromkeys(stored[k] for k in ids))


def unregistered(instance: dg.DagsterInstance, session_ids: Sequence[str]) -> list[str]:
    existing = set(instance.get_dynamic_partitions(SESSIONS))
    return [k for k in session_ids if k not in existing]


def register_sessions(instance: dg.DagsterInstance, session_ids: Sequence[str]) -> list[str]:
    """Add the sessions that are not partitions yet; every partition key, in order."""
    new = unregistered(instance, session_ids)
    if new:
        instance.add_dynamic_partitions(SESSIONS, new)
    return list(instance.get_dynamic_partitions(SESSIONS))


def session_runs(wanted: Sequence[str], ordered_keys: Sequence[str], batch_size: int) -> list[list[str]]:
    """The wanted keys split into runs of keys adjacent in partition order (a run
    covers a partition range), at most `batch_size` each."""
    position = {k: i for i, k in enumerate(ordered_keys)}
    runs: list[list[str]] = []
    for key in sorted(set(wanted), key=position.__getitem__):
        if runs and position[key] == position[runs[-1][-1]] + 1 and len(runs[-1]) < batch_size:
            runs[-1].append(key)
        else:
            runs.append([key])
    return runs


def run_tags(batch: Sequence[str]) -> dict[str, str]:
    """The tags of the run over `batch`: the partition range it covers, and its size."""
    return {RANGE_START: batch[0], RANGE_END: batch[-1], SESSIONS_TAG: str(len(batch))}


def sessions_of_run(tags: Mapping[str, str], ordered_keys: Sequence[str]) -> list[str]:
    """The sessions a run over a partition range covers, from its tags."""
    start, end = tags.get(RANGE_START), tags.get(RANGE_END)
    if start not in ordered_keys or end not in ordered_keys:
        return []
    keys = list(ordered_keys)
    return keys[keys.index(start) : keys.index(end) + 1]


def budget_shares(runs: Sequence[Sequence[str]], budget_usd: float | None) -> list[float | None]:
    """A budget for runs that may go at once: each run's share, by its sessions."""
    total = sum(len(r) for r in runs)
    if budget_usd is None or not total:
        return [None] * len(runs)
    return [budget_usd * len(r) / total for r in runs]


# -- a run in this process ----------------------------------------------------------


def execute_in_process(
    defs: dg.Definitions,
    asset_keys: Iterable[dg.AssetKey],
    *,
    instance: dg.DagsterInstance,
    tags: Mapping[str, str],
    run_config: Mapping | None,
    raise_on_error: bool,
) -> dg.ExecuteInProcessResult:
    """One run of the definitions' asset job over `asset_keys` (with their checks),
    here; the run records its asset selection, as a submitted run does."""
    return defs.resolve_implicit_global_asset_job_def().execute_in_process(
        asset_selection=list(asset_keys), instance=instance, tags=dict(tags), run_config=dict(run_config or {}) or None,
        raise_on_error=raise_on_error,
    )
