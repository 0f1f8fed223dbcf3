from __future__ import annotations

from collections.abc import Iterable

import dagster as dg

from ..catalog import CatalogMetric
from ..core.ontology import Scope
from .assets import SESSION_CONTEXT_KEY, asset_key

EVALUATE_JOB = "evaluate_sessions"


def evaluate_job(
    metrics: Iterable[CatalogMetric],
    name: str = EVALUATE_JOB,
    executor_def: dg.ExecutorDefinition = dg.in_process_executor,
) -> dg.UnresolvedAssetJobDefinition:
    """The metrics `mce_config.yaml` enables (and what they depend on), over the
    run's sessions, by default all in one process: the work per asset is small, and a
    process per step would cost more than the metrics. mce_dagster.definitions_celery
    spreads the steps over Celery workers instead."""
    # Population metrics are unpartitioned: they run after the sessions, in a run of their own.
    keys = [SESSION_CONTEXT_KEY, *(asset_key(m.key) for m in metrics if m.scope is not Scope.POPULATION)]
    return dg.define_asset_job(
        name=name,
        selection=dg.AssetSelection.assets(*keys),
        executor_def=executor_def,
        description="Evaluate the enabled metrics on a batch of sessions and write the results to the knowledge graph.",
    )
