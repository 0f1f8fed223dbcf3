"""Metric providers from installed packages, found through one entry-point group.

A provider is `native` (the definitions shipped with this package and the
functions of `core.metrics`) or whatever an entry point of the group
`metrics_computation_engine.plugins` provides. No other name is reserved: the
DeepEval, Ragas and Opik providers ship as optional packages that register
themselves here like any third party's.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..core.metric import MetricFunction
from .models import NATIVE_PROVIDER, PROVIDER_PATTERN, CatalogError

PLUGIN_GROUP = "metrics_computation_engine.plugins"


@dataclass(frozen=True)
class Plugin:
    """What an entry point of `metrics_computation_engine.plugins` returns (or a
    callable returning it): the provider's name, its YAML definitions, and the
    functions that compute them, by metric name."""

    provider: str
    metric_defs: Path
    functions: Mapping[str, MetricFunction] = field(default_factory=dict)


def _describe(entry_point: importlib.metadata.EntryPoint) -> str:
    dist = entry_point.dist
    package = f"{dist.name} {dist.version}, " if dist is not None else ""
    return f"{package}entry point {entry_point.name} = {entry_point.value}"


def discovered_plugins() -> list[tuple[Plugin, str]]:
    """Each installed plugin, with where it comes from (its distribution and entry
    point)."""
    found = []
    for entry_point in sorted(importlib.metadata.entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        where = _describe(entry_point)
        try:
            loaded = entry_point.load()
        except (ImportError, AttributeError) as exc:
            raise CatalogError(f"plugin ({where}) cannot be loaded: {type(exc).__name__}: {exc}") from exc
        plugin = loaded() if callable(loaded) and not isinstance(loaded, Plugin) else loaded
        if not isinstance(plugin, Plugin):
            raise CatalogError(f"plugin ({where}) gave {type(plugin).__name__}, not mce_dagster.catalog.Plugin")
        found.append((plugin, where))
    return found


def discover_plugins() -> list[Plugin]:
    return [plugin for plugin, _ in discovered_plugins()]


def register_providers(plugins: list[tuple[Plugin, str]]) -> dict[str, str]:
    """Provider name -> where it comes from; a name given twice, or not usable in a
    metric's name, is refused."""
    providers = {NATIVE_PROVIDER: "built in"}
    for plugin, where in plugins:
        if not re.match(PROVIDER_PATTERN, plugin.provider):
            raise CatalogError(f"plugin ({where}): provider name {plugin.provider!r} must match {PROVIDER_PATTERN}")
        if plugin.provider in providers:
            raise CatalogError(
                f"plugin ({where}): provider {plugin.provider!r} is already provided ({providers[plugin.provider]})"
            )
        providers[plugin.provider] = where
    return providers
