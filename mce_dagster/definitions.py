"""The Dagster entry point: `dagster dev -w workspace.yaml` loads `defs` from here."""

from __future__ import annotations

import functools

import dagster as dg

from .catalog import Catalog, CatalogMetric, load_catalog
from .config import MCEConfig, load_config
from .core.ontology import Scope
from .defs.assets import (
    METRIC_IO_MANAGER,
    SESSION_CONTEXT_IO_MANAGER,
    SESSION_CONTEXT_KEY,
    asset_key,
    build_metric_asset,
    session_context,
)
from .defs.io_managers import MetricResultIOManager, SessionContextIOManager
from .defs.jobs import evaluate_job
from .defs.population import build_population_asset
from .defs.report import evaluation_report
from .defs.resources import knowledge_graph_resource
from .defs.sensors import build_sensors, session_queue_resource
from .files import keep_private
from .prices import load_price_table
from .settings import Settings

# The code server loads this first, and its run workers are its children.
keep_private()


@functools.lru_cache(maxsize=1)
def runtime() -> tuple[Catalog, MCEConfig]:
    """The catalog and configuration the definitions are built from."""
    catalog = load_catalog()
    return catalog, load_config(catalog)


def sensor_metrics(config: MCEConfig) -> list[CatalogMetric]:
    """The enabled metrics the sensors evaluate: without a judge model, judged metrics
    and what reads them are left out, as `mce compute` leaves them out, so their
    partitions stay unmaterialized until a judge is configured."""
    if Settings.from_env().judge.configured:
        return list(config.enabled)
    dropped: set = set()
    for m in config.enabled:  # dependencies first
        if m.definition.kind == "llm_judge" or any(dep in dropped for dep in m.dependencies):
            dropped.add(m.key)
    return [m for m in config.enabled if m.key not in dropped]


def build_definitions(catalog: Catalog, config: MCEConfig) -> dg.Definitions:
    knowledge_graph = knowledge_graph_resource()
    metric_assets = [
        build_population_asset(m) if m.scope is Scope.POPULATION else build_metric_asset(m, load_price_table)
        for m in catalog.ordered()
    ]
    return dg.Definitions(
        assets=[session_context, *metric_assets, evaluation_report],
        jobs=[evaluate_job(config.enabled)],
        # Off by default: `dagster sensor start session_queue_sensor` (or session_poll_sensor).
        sensors=build_sensors([SESSION_CONTEXT_KEY, *(asset_key(m.key) for m in sensor_metrics(config) if m.scope is not Scope.POPULATION)]),
        resources={
            "knowledge_graph": knowledge_graph,
            "session_queue": session_queue_resource(),
            SESSION_CONTEXT_IO_MANAGER: SessionContextIOManager(knowledge_graph=knowledge_graph),
            METRIC_IO_MANAGER: MetricResultIOManager(knowledge_graph=knowledge_graph),
        },
        executor=dg.in_process_executor,
    )


defs = build_definitions(*runtime())
