from __future__ import annotations

from collections.abc import Iterable

import dagster as dg

from ..catalog import CatalogMetric
from ..core.ontology import Scope
from .assets import SESSION_CONTEXT_KEY, asset_key

EVALUATE_JOB = "evaluate_sessions"


def evaluate_job(metrics: Iterable[CatalogMetric], name: str = EVALUATE_JOB) -> dg.UnresolvedAssetJobDefinition:
    """The metrics `mce_config.yaml` enables (and what they depend on), over the
    run's sessions, all in one process: the work per asset is small, and a process
    per step would cost more than the metrics."""
    # Population metrics are unpartitioned: they run after the sessions, in a run of their own.
    keys = [SESSION_CONTEXT_KEY, *(asset_key(m.key) for m in metrics if m.scope is not Scope.POPULATION)]
    return dg.define_asset_job(
        name=name,
        selection=dg.AssetSelection.assets(*keys),
        executor_def=dg.in_process_executor,
        description="Evaluate the enabled metrics on a batch of sessions and write the results to the knowledge graph.",
    )
