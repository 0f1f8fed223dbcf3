"""Reading the catalog: every YAML definition of the native provider and of each
plugin, validated, matched with the function that computes it, and linked to what
it depends on. Any problem is a `CatalogError` that names the file and the field,
so a broken catalog stops the engine before a run starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..bundled import shipped_path
from ..core.metric import DependencyKey, MetricFunction, native_functions
from ..core.metrics.aggregates import aggregate
from ..core.metrics.judged import judged
from ..errors import UnknownMetricError
from .models import NATIVE_PROVIDER, Catalog, CatalogError, CatalogMetric, MetricDefinition, MetricRef
from .plugins import Plugin, discovered_plugins, register_providers

DEFAULT_DEFS_DIR = shipped_path("metric_defs")


def validation_message(where: str, exc: ValidationError, *, sep: str = ".", member: str = "field") -> str:
    """One line for all a validation error says, each problem at its location
    (`scopes.0`, `metrics/Session`), an unknown field or key named as such."""
    parts = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        if loc[-1:] == ["[key]"]:  # a key of a mapping that is not one of the allowed
            loc.pop()
            parts.append(f"{sep.join(loc)}: unknown {member} {loc[-1]!r} ({err['msg']})")
        elif err["type"] == "extra_forbidden":
            parts.append(f"unknown {member} {sep.join(loc)!r}")
        elif loc:
            parts.append(f"{sep.join(loc)}: {err['msg']}")
        else:
            parts.append(err["msg"])
    return f"{where}: " + "; ".join(parts)


def _read_definitions(path: Path) -> list[tuple[str, dict[str, Any]]]:
    try:
        loaded = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path}: not valid YAML: {exc}") from exc
    items = loaded if isinstance(loaded, list) else [loaded]
    out = []
    for i, item in enumerate(items):
        where = f"{path}" if len(items) == 1 else f"{path}[{i}]"
        if not isinstance(item, dict):
            raise CatalogError(f"{where}: a definition must be a mapping, not {type(item).__name__}")
        out.append((where, item))
    return out


def _definitions(
    sources: list[tuple[Path, str]], providers: Mapping[str, str]
) -> tuple[dict[tuple[str, str], MetricDefinition], dict[tuple[str, str], str]]:
    """Every definition by (provider, name), and the file each comes from."""
    definitions: dict[tuple[str, str], MetricDefinition] = {}
    origin: dict[tuple[str, str], str] = {}
    for folder, provider in sources:
        if not folder.is_dir():
            raise CatalogError(f"metric definitions folder {folder} ({provider}) does not exist")
        for path in sorted(folder.rglob("*.yaml")):
            for where, raw in _read_definitions(path):
                try:
                    definition = MetricDefinition.model_validate(raw)
                except ValidationError as exc:
                    raise CatalogError(validation_message(where, exc)) from None
                if definition.provider not in providers:
                    raise CatalogError(
                        f"{where}: unknown provider {definition.provider!r} (known: {', '.join(sorted(providers))}; "
                        "a provider is `native` or an installed plugin)"
                    )
                if definition.provider != provider:
                    raise CatalogError(
                        f"{where}: the definitions of {provider!r} hold a metric of provider {definition.provider!r}"
                    )
                if definition.key in definitions:
                    raise CatalogError(f"{where}: {definition.ref} is already defined in {origin[definition.key]}")
                definitions[definition.key] = definition
                origin[definition.key] = where
    return definitions, origin


def load_catalog(defs_dir: Path | None = None, plugins: Iterable[Plugin] | None = None) -> Catalog:
    """Load and validate every definition: the native ones in `defs_dir` (the
    shipped catalog by default) and those of `plugins` (the installed ones by
    default); any problem is a CatalogError naming it."""
    found = discovered_plugins() if plugins is None else [(p, "plugin") for p in plugins]
    providers = register_providers(found)
    functions: dict[tuple[str, str], MetricFunction] = {(NATIVE_PROVIDER, n): f for n, f in native_functions().items()}
    sources = [(Path(defs_dir or DEFAULT_DEFS_DIR), NATIVE_PROVIDER)]
    for plugin, _ in found:
        sources.append((Path(plugin.metric_defs), plugin.provider))
        functions.update({(plugin.provider, n): f for n, f in plugin.functions.items()})
    definitions, origin = _definitions(sources, providers)

    metrics: dict[DependencyKey, CatalogMetric] = {}
    for key, definition in definitions.items():
        if definition.kind == "aggregate":
            compute = aggregate
        elif definition.kind == "llm_judge" and definition.judge is not None and key not in functions:
            compute = judged  # the rubric and evidence come from the definition
        elif key in functions:
            compute = functions[key]
        else:
            raise CatalogError(f"{origin[key]}: no function computes {definition.provider}.{definition.name}")
        for scope in definition.scopes:
            metric = CatalogMetric(definition, scope, compute, definition.dependency_keys(scope))
            metrics[metric.key] = metric

    catalog = Catalog(definitions=definitions, metrics=metrics, providers=providers)
    for metric in metrics.values():
        for dep in metric.dependencies:
            try:
                catalog.resolve(MetricRef(dep.name, dep.provider, dep.scope))
            except UnknownMetricError as exc:
                raise CatalogError(
                    f"{origin[metric.definition.key]}: {metric.key} depends on {dep}, which no definition provides: {exc}"
                ) from None
    _check_acyclic(metrics)
    return catalog


def _check_acyclic(metrics: Mapping[DependencyKey, CatalogMetric]) -> None:
    state: dict[DependencyKey, int] = {}
    path: list[DependencyKey] = []

    def visit(key: DependencyKey) -> None:
        state[key] = 1
        path.append(key)
        for dep in metrics[key].dependencies:
            if state.get(dep) == 1:
                cycle = path[path.index(dep) :] + [dep]
                raise CatalogError("dependency cycle: " + " -> ".join(str(k) for k in cycle))
            if dep not in state:
                visit(dep)
        path.pop()
        state[key] = 2

    for key in sorted(metrics, key=str):
        if key not in state:
            visit(key)
