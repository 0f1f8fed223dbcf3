"""The metric catalog: definitions in `metric_defs/` (YAML), loaded and validated.

A metric is defined once, here; the Dagster assets, the CLI listing and the
graph's `Metric` nodes are all generated from these definitions. `models` says
what a definition is and how a metric is named, `loader` reads and checks the
YAML, `plugins` finds the providers installed through entry points.
"""

from ..core.metrics.aggregates import AGGREGATE_FUNCTIONS
from ..errors import UnknownMetricError
from .loader import DEFAULT_DEFS_DIR, load_catalog, validation_message
from .models import (
    CUT_SCOPE,
    NATIVE_PROVIDER,
    AggregateSpec,
    Catalog,
    CatalogError,
    CatalogMetric,
    JudgeSpec,
    MetricDefinition,
    MetricRef,
    parse_dependency,
)
from .plugins import PLUGIN_GROUP, Plugin, discover_plugins, discovered_plugins

__all__ = [
    "AGGREGATE_FUNCTIONS",
    "CUT_SCOPE",
    "DEFAULT_DEFS_DIR",
    "NATIVE_PROVIDER",
    "PLUGIN_GROUP",
    "AggregateSpec",
    "Catalog",
    "CatalogError",
    "CatalogMetric",
    "JudgeSpec",
    "MetricDefinition",
    "MetricRef",
    "Plugin",
    "UnknownMetricError",
    "discover_plugins",
    "discovered_plugins",
    "load_catalog",
    "parse_dependency",
    "validation_message",
]
