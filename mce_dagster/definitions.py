"""The Dagster entry point: `dagster dev -w workspace.yaml` loads `defs` from here.

`defs` is built from the settings of the process that asks for it, read once there;
its resources carry them to every step and sensor tick. A process whose settings
change after it asked (a test, a notebook setting a variable) gets definitions built
for the new ones, as a reloaded code location would."""

from __future__ import annotations

import functools
from collections import OrderedDict

import dagster as dg

from . import evaluation
from .catalog import Catalog, load_catalog
from .config import MCEConfig, load_config
from .core.ontology import Scope
from .defs.assets import METRIC_IO_MANAGER, SESSION_CONTEXT_IO_MANAGER, build_metric_asset, session_context
from .defs.io_managers import MetricResultIOManager, SessionContextIOManager
from .defs.jobs import evaluate_job
from .defs.judging import provider_options
from .defs.population import build_population_asset
from .defs.report import evaluation_report
from .defs.resources import KNOWLEDGE_GRAPH, build_resources
from .defs.sensors import build_sensors
from .files import keep_private
from .settings import Settings

# The code server loads this first, and its run workers are its children.
keep_private()


@functools.lru_cache(maxsize=1)
def runtime() -> tuple[Catalog, MCEConfig]:
    """The catalog and configuration the definitions are built from."""
    catalog = load_catalog()
    return catalog, load_config(catalog, Settings.from_env().config_path)


def build_definitions(catalog: Catalog, config: MCEConfig, settings: Settings | None = None) -> dg.Definitions:
    """The definitions of the catalog and configuration, their resources made from
    `settings` (else the process's, read here)."""
    settings = settings or Settings.from_env()
    resources = build_resources(settings)
    knowledge_graph = resources[KNOWLEDGE_GRAPH]
    options = provider_options(config.providers)
    metric_assets = [
        build_population_asset(m) if m.scope is Scope.POPULATION else build_metric_asset(m, options)
        for m in catalog.ordered()
    ]
    return dg.Definitions(
        assets=[session_context, *metric_assets, evaluation_report],
        jobs=[evaluate_job(evaluation.enabled(config))],
        # Off by default: `dagster sensor start session_queue_sensor` (or session_poll_sensor).
        # They evaluate what `mce compute --all` does: judged metrics only with a judge.
        sensors=build_sensors(evaluation.plan(config, judge_configured=settings.judge.configured).asset_keys, settings),
        resources={
            **resources,
            SESSION_CONTEXT_IO_MANAGER: SessionContextIOManager(knowledge_graph=knowledge_graph),
            METRIC_IO_MANAGER: MetricResultIOManager(knowledge_graph=knowledge_graph),
        },
        executor=dg.in_process_executor,
    )


# Definitions by the settings they were built from: a few, for the processes whose settings change.
_BUILT: "OrderedDict[Settings, dg.Definitions]" = OrderedDict()
_BUILT_KEPT = 4


def definitions_for(settings: Settings) -> dg.Definitions:
    """The definitions of the catalog and configuration under these settings, built once."""
    if settings not in _BUILT:
        _BUILT[settings] = build_definitions(*runtime(), settings)
        while len(_BUILT) > _BUILT_KEPT:
            _BUILT.popitem(last=False)
    _BUILT.move_to_end(settings)
    return _BUILT[settings]


def __getattr__(name: str):
    if name == "defs":  # what Dagster loads, and what `mce compute` runs
        return definitions_for(Settings.from_env())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    # Dagster finds the definitions among the module's names.
    return sorted([*globals(), "defs"])
