"""The Dagster entry point: `dagster dev -w workspace.yaml` loads `defs` from here."""

from __future__ import annotations

import functools

import dagster as dg

from . import evaluation
from .catalog import Catalog, load_catalog
from .config import MCEConfig, load_config
from .core.ontology import Scope
from .defs.assets import METRIC_IO_MANAGER, SESSION_CONTEXT_IO_MANAGER, build_metric_asset, session_context
from .defs.io_managers import MetricResultIOManager, SessionContextIOManager
from .defs.jobs import evaluate_job
from .defs.population import build_population_asset
from .defs.report import evaluation_report
from .defs.resources import knowledge_graph_resource
from .defs.sensors import build_sensors, session_queue_resource
from .files import keep_private
from .prices import load_price_table

# The code server loads this first, and its run workers are its children.
keep_private()


@functools.lru_cache(maxsize=1)
def runtime() -> tuple[Catalog, MCEConfig]:
    """The catalog and configuration the definitions are built from."""
    catalog = load_catalog()
    return catalog, load_config(catalog)


def build_definitions(catalog: Catalog, config: MCEConfig) -> dg.Definitions:
    knowledge_graph = knowledge_graph_resource()
    metric_assets = [
        build_population_asset(m) if m.scope is Scope.POPULATION else build_metric_asset(m, load_price_table)
        for m in catalog.ordered()
    ]
    return dg.Definitions(
        assets=[session_context, *metric_assets, evaluation_report],
        jobs=[evaluate_job(evaluation.enabled(config))],
        # Off by default: `dagster sensor start session_queue_sensor` (or session_poll_sensor).
        # They evaluate what `mce compute --all` does: judged metrics only with a judge.
        sensors=build_sensors(evaluation.plan(config).asset_keys),
        resources={
            "knowledge_graph": knowledge_graph,
            "session_queue": session_queue_resource(),
            SESSION_CONTEXT_IO_MANAGER: SessionContextIOManager(knowledge_graph=knowledge_graph),
            METRIC_IO_MANAGER: MetricResultIOManager(knowledge_graph=knowledge_graph),
        },
        executor=dg.in_process_executor,
    )


defs = build_definitions(*runtime())
