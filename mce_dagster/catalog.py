"""The metric catalog: definitions in `metric_defs/` (YAML), loaded and validated.

A metric is defined once, here; the Dagster assets, the CLI listing and the
graph's `Metric` nodes are all generated from these definitions.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .core.metric import DependencyKey, MetricFunction, native_functions
from .core.metrics.aggregates import AGGREGATE_FUNCTIONS, aggregate
from .core.ontology import COMMON_PROPS, EXTRA_PROPS, Label, Scope

PLUGIN_GROUP = "metrics_computation_engine.plugins"
BUILTIN_PROVIDERS = ("native", "deepeval", "ragas", "opik")
DEFAULT_DEFS_DIR = Path(__file__).resolve().parent.parent / "metric_defs"


class CatalogError(ValueError):
    """A definition that does not fit; the message names the file and the field."""


def parse_dependency(ref: str, own_scope: Scope) -> DependencyKey:
    """`Name`, `Scope/Name` or `Scope/provider_Name` (the asset's name)."""
    scope_part, _, name_part = ref.rpartition("/")
    scope = Scope(scope_part) if scope_part else own_scope
    provider, sep, name = name_part.partition("_")
    if sep and provider in BUILTIN_PROVIDERS:
        return DependencyKey(scope, name, provider)
    return DependencyKey(scope, name_part)


class AggregateSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    function: Literal["avg", "min", "max", "sum"]
    of: str  # `Scope/Name` of a call-scope metric

    @field_validator("of")
    @classmethod
    def _has_scope(cls, value: str) -> str:
        scope, sep, _ = value.partition("/")
        if not sep:
            raise ValueError(f"aggregate.of {value!r} must name a scope, as in LLMCall/Duration")
        Scope(scope)
        return value

    @property
    def of_key(self) -> DependencyKey:
        return parse_dependency(self.of, Scope.SESSION)


class JudgeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    input: Literal["qa", "transcript", "agent_io", "tool_call"]
    rubric: str


class MetricDefinition(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9]*$")
    provider: str = "native"
    kind: Literal["deterministic", "llm_judge", "aggregate"]
    scopes: tuple[Scope, ...] = Field(min_length=1)
    unit: str
    value_range: tuple[float | None, float | None]
    version: int = Field(ge=1)
    description: str
    caveats: str | None = None
    depends_on: tuple[str, ...] = ()
    # Graph properties read, by label: resolved against a live graph by `mce kg check`.
    requires: dict[Label, tuple[str, ...]] = Field(default_factory=dict)
    aggregate: AggregateSpec | None = None
    judge: JudgeSpec | None = None

    @field_validator("scopes")
    @classmethod
    def _distinct_scopes(cls, scopes: tuple[Scope, ...]) -> tuple[Scope, ...]:
        if len(set(scopes)) != len(scopes):
            raise ValueError("a scope is listed twice")
        return scopes

    @field_validator("requires")
    @classmethod
    def _known_properties(cls, requires: dict[Label, tuple[str, ...]]) -> dict[Label, tuple[str, ...]]:
        for label, props in requires.items():
            known = set(COMMON_PROPS) | set(EXTRA_PROPS.get(label, ()))
            if label is Label.LLM_CALL:
                known |= {"inputMessages", "outputMessages"}
            unknown = sorted(set(props) - known)
            if unknown:
                raise ValueError(f"{label.value} has no propert{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)}")
        return requires

    @model_validator(mode="after")
    def _kind_fields(self) -> "MetricDefinition":
        if self.kind == "aggregate":
            if self.aggregate is None:
                raise ValueError("an aggregate needs `aggregate: {function, of}`")
            if self.scopes != (Scope.SESSION,):
                raise ValueError("an aggregate is evaluated at Session scope only")
            if self.aggregate.of not in self.depends_on:
                raise ValueError(f"an aggregate must list {self.aggregate.of} in depends_on")
        elif self.aggregate is not None:
            raise ValueError(f"`aggregate` is only for kind aggregate, not {self.kind}")
        if self.kind == "llm_judge" and self.judge is None and self.provider == "native":
            raise ValueError("a native llm_judge metric needs `judge: {input, rubric}`")
        lo, hi = self.value_range
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"value_range {list(self.value_range)} is empty")
        return self

    @property
    def key(self) -> tuple[str, str]:
        return (self.provider, self.name)

    def dependency_keys(self, scope: Scope) -> tuple[DependencyKey, ...]:
        return tuple(parse_dependency(ref, scope) for ref in self.depends_on)

    def asset_name(self) -> str:
        return self.name if self.provider == "native" else f"{self.provider}_{self.name}"


@dataclass(frozen=True)
class CatalogMetric:
    """One metric at one scope: one Dagster asset."""

    definition: MetricDefinition
    scope: Scope
    compute: MetricFunction
    dependencies: tuple[DependencyKey, ...]

    @property
    def key(self) -> DependencyKey:
        return DependencyKey(self.scope, self.definition.name, self.definition.provider)

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def provider(self) -> str:
        return self.definition.provider


@dataclass(frozen=True)
class Plugin:
    """What an entry point of `metrics_computation_engine.plugins` returns."""

    provider: str
    metric_defs: Path
    functions: Mapping[str, MetricFunction] = field(default_factory=dict)


@dataclass
class Catalog:
    definitions: dict[tuple[str, str], MetricDefinition]
    metrics: dict[DependencyKey, CatalogMetric]
    providers: dict[str, str]  # provider -> where it comes from

    def get(self, key: DependencyKey) -> CatalogMetric:
        return self.metrics[key]

    def find(self, name: str, provider: str | None = None) -> MetricDefinition:
        """By `Name` or `provider.Name`."""
        if provider is None and "." in name:
            provider, name = name.split(".", 1)
        matches = [d for (p, n), d in self.definitions.items() if n == name and (provider is None or p == provider)]
        if not matches:
            raise KeyError(f"no metric named {name!r}" + (f" from provider {provider!r}" if provider else ""))
        if len(matches) > 1:
            native = [d for d in matches if d.provider == "native"]
            if native:
                return native[0]
        return matches[0]

    def ordered(self) -> list[CatalogMetric]:
        """Every metric at every scope, dependencies first."""
        order: list[CatalogMetric] = []
        done: set[DependencyKey] = set()

        def visit(key: DependencyKey) -> None:
            if key in done:
                return
            done.add(key)
            for dep in self.metrics[key].dependencies:
                visit(dep)
            order.append(self.metrics[key])

        for key in sorted(self.metrics, key=str):
            visit(key)
        return order

    def closure(self, keys: Iterable[DependencyKey]) -> list[CatalogMetric]:
        """The metrics asked for and everything they depend on, dependencies first."""
        wanted: set[DependencyKey] = set()
        stack = list(keys)
        while stack:
            key = stack.pop()
            if key not in wanted:
                wanted.add(key)
                stack.extend(self.metrics[key].dependencies)
        return [m for m in self.ordered() if m.key in wanted]


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


def _format_error(where: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown field {loc!r}")
        elif loc:
            parts.append(f"{loc}: {err['msg']}")
        else:
            parts.append(err["msg"])
    return f"{where}: " + "; ".join(parts)


def discover_plugins() -> list[Plugin]:
    plugins = []
    for entry_point in importlib.metadata.entry_points(group=PLUGIN_GROUP):
        loaded = entry_point.load()
        plugin = loaded() if callable(loaded) and not isinstance(loaded, Plugin) else loaded
        if not isinstance(plugin, Plugin):
            raise CatalogError(
                f"plugin entry point {entry_point.name!r} ({entry_point.value}) gave "
                f"{type(plugin).__name__}, not mce_dagster.catalog.Plugin"
            )
        plugins.append(plugin)
    return plugins


def load_catalog(
    defs_dir: Path | None = None,
    plugins: Iterable[Plugin] | None = None,
) -> Catalog:
    """Load and validate every definition; any problem is a CatalogError naming it."""
    defs_dir = defs_dir or DEFAULT_DEFS_DIR
    if not defs_dir.is_dir():
        raise CatalogError(f"metric definitions folder {defs_dir} does not exist")
    plugins = list(discover_plugins() if plugins is None else plugins)
    providers = {p: "built in" for p in BUILTIN_PROVIDERS}
    functions: dict[tuple[str, str], MetricFunction] = {("native", n): f for n, f in native_functions().items()}
    sources: list[tuple[Path, str | None]] = [(defs_dir, None)]
    for plugin in plugins:
        if plugin.provider in providers and providers[plugin.provider] == "built in":
            raise CatalogError(f"plugin provider {plugin.provider!r} clashes with a built-in provider")
        providers[plugin.provider] = "plugin"
        sources.append((Path(plugin.metric_defs), plugin.provider))
        functions.update({(plugin.provider, n): f for n, f in plugin.functions.items()})

    definitions: dict[tuple[str, str], MetricDefinition] = {}
    origin: dict[tuple[str, str], str] = {}
    for folder, plugin_provider in sources:
        for path in sorted(folder.rglob("*.yaml")):
            for where, raw in _read_definitions(path):
                try:
                    definition = MetricDefinition.model_validate(raw)
                except ValidationError as exc:
                    raise CatalogError(_format_error(where, exc)) from None
                if definition.provider not in providers:
                    raise CatalogError(
                        f"{where}: unknown provider {definition.provider!r} "
                        f"(known: {', '.join(sorted(providers))})"
                    )
                if plugin_provider and definition.provider != plugin_provider:
                    raise CatalogError(
                        f"{where}: the plugin for {plugin_provider!r} defines a metric of provider {definition.provider!r}"
                    )
                if definition.key in definitions:
                    raise CatalogError(
                        f"{where}: {definition.provider}.{definition.name} is already defined in {origin[definition.key]}"
                    )
                definitions[definition.key] = definition
                origin[definition.key] = where

    metrics: dict[DependencyKey, CatalogMetric] = {}
    for key, definition in definitions.items():
        if definition.kind == "aggregate":
            compute = aggregate
        elif key in functions:
            compute = functions[key]
        else:
            raise CatalogError(f"{origin[key]}: no function computes {definition.provider}.{definition.name}")
        for scope in definition.scopes:
            try:
                deps = definition.dependency_keys(scope)
            except ValueError as exc:
                raise CatalogError(f"{origin[key]}: depends_on: {exc}") from None
            metric = CatalogMetric(definition, scope, compute, deps)
            metrics[metric.key] = metric

    for metric in metrics.values():
        for dep in metric.dependencies:
            if dep not in metrics:
                raise CatalogError(
                    f"{origin[metric.definition.key]}: {metric.key} depends on {dep}, which no definition provides"
                )
    _check_acyclic(metrics)
    return Catalog(definitions=definitions, metrics=metrics, providers=providers)


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


__all__ = [
    "AGGREGATE_FUNCTIONS",
    "Catalog",
    "CatalogError",
    "CatalogMetric",
    "MetricDefinition",
    "Plugin",
    "load_catalog",
]
