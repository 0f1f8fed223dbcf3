from __future__ import annotations

from typing import TYPE_CHECKING

import dagster as dg

if TYPE_CHECKING:
    from ..evaluation import Evaluation

EVALUATE_JOB = "evaluate_sessions"


def evaluate_job(
    evaluation: "Evaluation",
    name: str = EVALUATE_JOB,
    executor_def: dg.ExecutorDefinition = dg.in_process_executor,
) -> dg.UnresolvedAssetJobDefinition:
    """The session runs of `evaluation` (in the definitions: every metric
    `mce_config.yaml` enables, with what it depends on), by default all in one
    process: the work per asset is small, and a process per step would cost more
    than the metrics. mce_dagster.definitions_celery spreads the steps over Celery
    workers instead. Population metrics are unpartitioned: they run after the
    sessions, in a run of their own."""
    return dg.define_asset_job(
        name=name,
        selection=dg.AssetSelection.assets(*evaluation.asset_keys),
        executor_def=executor_def,
        description="Evaluate the enabled metrics on a batch of sessions and write the results to the knowledge graph.",
    )
