"""What the catalog holds: metric definitions as validated from YAML, one metric at
one scope, and the loaded catalog, which is also where a metric's name is read.

A metric is named `[Scope/][provider.]Name` wherever a person or a definition
names one (`depends_on`, `mce_config.yaml`, `--metrics`, `mce metric show`), and
that text is parsed in one place, `MetricRef.parse`. Without a provider the name
means the native metric, as its asset name does: the same name under two providers
is two metrics, and neither stands in for the other.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from ..core.metric import DependencyKey, MetricFunction
from ..core.ontology import COMMON_PROPS, EXTRA_PROPS, Label, Scope
from ..errors import ConfigurationError, UnknownMetricError, shown

NATIVE_PROVIDER = "native"
NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9]*$"
# No `/` or `.`: they separate the parts of a reference.
PROVIDER_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]*$"
_NAME = re.compile(NAME_PATTERN)
_PROVIDER = re.compile(PROVIDER_PATTERN)


class CatalogError(ConfigurationError):
    """A definition or plugin that does not fit; the message names the file and the field."""


@dataclass(frozen=True)
class MetricRef:
    """A metric as named in text, its scope left open unless it is given."""

    name: str
    provider: str = NATIVE_PROVIDER
    scope: Scope | None = None

    @classmethod
    def parse(cls, text: str) -> "MetricRef":
        """`Name`, `provider.Name`, `Scope/Name`, `Scope/provider.Name`; also
        `provider_Name`, the asset's spelling. A name holds neither `.` nor `_`, so
        the last of them ends the provider."""
        text = text.strip()
        scope_text, slash, rest = text.rpartition("/")
        provider, dot, name = rest.rpartition(".")
        if not dot:
            provider, _, name = rest.rpartition("_")
        if not _NAME.match(name) or (provider and not _PROVIDER.match(provider)) or (rest != name and not provider):
            raise UnknownMetricError(f"{shown(text)} is not a metric name (Name, provider.Name, Scope/Name)")
        if not slash:
            return cls(name, provider or NATIVE_PROVIDER)
        try:
            scope = Scope(scope_text)
        except ValueError:
            known = ", ".join(s.value for s in Scope)
            raise UnknownMetricError(f"unknown scope {shown(scope_text)} in {shown(text)} (scopes: {known})") from None
        return cls(name, provider or NATIVE_PROVIDER, scope)

    def key(self, default_scope: Scope) -> DependencyKey:
        return DependencyKey(self.scope or default_scope, self.name, self.provider)

    def matches(self, key: DependencyKey) -> bool:
        """Names that metric: the same provider and name, at its scope if one is given."""
        return (key.provider, key.name) == (self.provider, self.name) and self.scope in (None, key.scope)

    @property
    def qualified_name(self) -> str:
        return self.name if self.provider == NATIVE_PROVIDER else f"{self.provider}.{self.name}"

    def __str__(self) -> str:
        return f"{self.scope.value}/{self.qualified_name}" if self.scope else self.qualified_name


def parse_dependency(ref: str, own_scope: Scope) -> DependencyKey:
    """A `depends_on` entry as the key of the metric it names; the scope defaults to
    the dependent metric's own."""
    return MetricRef.parse(ref).key(own_scope)


def _valid_reference(text: str, needs_scope: bool = False) -> str:
    # Pydantic turns a ValueError raised here into a validation error on the field.
    try:
        ref = MetricRef.parse(text)
    except UnknownMetricError as exc:
        raise ValueError(str(exc)) from None
    if needs_scope and ref.scope is None:
        raise ValueError(f"{text!r} must name a scope, as in LLMCall/Duration")
    return text


Reference = Annotated[str, AfterValidator(_valid_reference)]
ScopedReference = Annotated[str, AfterValidator(lambda text: _valid_reference(text, needs_scope=True))]


class AggregateSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    function: Literal["avg", "min", "max", "sum"]
    of: ScopedReference  # of a call-scope metric

    @property
    def of_key(self) -> DependencyKey:
        return parse_dependency(self.of, Scope.SESSION)


class JudgeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    input: Literal["qa", "transcript", "agent_io", "tool_call"]
    rubric: str


# The dimensions a metric's results may be cut by (`cuts:` in its definition, an
# allow-list), with the call scope whose node carries the dimension; the session's
# dimensions (its app, its id, its start day and month) are there at every scope.
CUT_SCOPE: dict[str, Scope | None] = {
    "app": None,
    "session": None,
    "day": None,
    "month": None,
    "agent": Scope.AGENT_CALL,
    "model": Scope.LLM_CALL,
    "tool": Scope.TOOL_CALL,
}
Cut = Literal["app", "session", "day", "month", "agent", "model", "tool"]


class MetricDefinition(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN)
    provider: str = Field(NATIVE_PROVIDER, pattern=PROVIDER_PATTERN)
    kind: Literal["deterministic", "llm_judge", "aggregate"]
    scopes: tuple[Scope, ...] = Field(min_length=1)
    unit: str
    value_range: tuple[float | None, float | None]
    version: int = Field(ge=1)
    description: str
    caveats: str | None = None
    depends_on: tuple[Reference, ...] = ()
    # Graph properties read, by label: resolved against a live graph by `mce kg check`.
    requires: dict[Label, tuple[str, ...]] = Field(default_factory=dict)
    aggregate: AggregateSpec | None = None
    judge: JudgeSpec | None = None
    # What a query may cut the results by (none unless listed).
    cuts: tuple[Cut, ...] = ()

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
        if self.kind == "llm_judge" and self.judge is None and self.provider == NATIVE_PROVIDER:
            raise ValueError("a native llm_judge metric needs `judge: {input, rubric}`")
        for cut in self.cuts:
            needs = CUT_SCOPE[cut]
            if needs is not None and needs not in self.scopes:
                raise ValueError(f"cut {cut!r} needs scope {needs.value}, which the metric does not list")
        if len(set(self.cuts)) != len(self.cuts):
            raise ValueError("a cut is listed twice")
        lo, hi = self.value_range
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"value_range {list(self.value_range)} is empty")
        return self

    @property
    def key(self) -> tuple[str, str]:
        return (self.provider, self.name)

    @property
    def ref(self) -> MetricRef:
        return MetricRef(self.name, self.provider)

    def cuts_at(self, scope: Scope) -> tuple[str, ...]:
        """The cuts allowed for results at one scope."""
        return tuple(c for c in self.cuts if CUT_SCOPE[c] in (None, scope))

    def dependency_keys(self, scope: Scope) -> tuple[DependencyKey, ...]:
        return tuple(parse_dependency(ref, scope) for ref in self.depends_on)

    def asset_name(self) -> str:
        return self.ref.key(self.scopes[0]).asset_name


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


@dataclass
class Catalog:
    definitions: dict[tuple[str, str], MetricDefinition]
    metrics: dict[DependencyKey, CatalogMetric]
    providers: dict[str, str]  # provider -> where it comes from

    def get(self, key: DependencyKey) -> CatalogMetric:
        try:
            return self.metrics[key]
        except KeyError:
            raise UnknownMetricError(f"the catalog has no metric {key}") from None

    def definition(self, ref: MetricRef) -> MetricDefinition:
        """The definition a reference names; an `UnknownMetricError` says what exists."""
        found = self.definitions.get((ref.provider, ref.name))
        if found is not None:
            return found
        if ref.provider not in self.providers:
            raise UnknownMetricError(
                f"unknown provider {shown(ref.provider)} in {shown(ref)} (providers: {', '.join(sorted(self.providers))})"
            )
        elsewhere = sorted(str(d.ref) for (p, n), d in self.definitions.items() if n == ref.name)
        names = sorted(n for p, n in self.definitions if p == ref.provider)
        close = difflib.get_close_matches(ref.name, names, n=3)
        message = f"no metric named {shown(ref.name)}"
        if ref.provider != NATIVE_PROVIDER:
            message += f" from provider {shown(ref.provider)}"
        if elsewhere:
            message += f"; defined as {', '.join(elsewhere)}"
        elif close:
            message += f" (did you mean {' or '.join(close)}?)"
        else:
            message += f" (known {ref.provider} metrics: {', '.join(names) or 'none'})"
        raise UnknownMetricError(message)

    def find(self, name: str, provider: str | None = None) -> MetricDefinition:
        """By `Name` or `provider.Name` (a scope in the name is ignored)."""
        ref = MetricRef.parse(name)
        return self.definition(replace(ref, provider=provider) if provider else ref)

    def resolve(self, text: str | MetricRef, scope: Scope | None = None) -> list[CatalogMetric]:
        """The metrics a name stands for: at its scope (or `scope`), else at every
        scope its definition lists."""
        ref = MetricRef.parse(text) if isinstance(text, str) else text
        if scope is not None and ref.scope not in (None, scope):
            raise UnknownMetricError(f"{ref} names scope {ref.scope.value}, not {scope.value}")
        definition = self.definition(ref)
        wanted = ref.scope or scope
        if wanted is None:
            return [self.metrics[ref.key(s)] for s in definition.scopes]
        if ref.key(wanted) not in self.metrics:
            scopes = ", ".join(s.value for s in definition.scopes)
            raise UnknownMetricError(f"{ref.qualified_name} is not defined at {wanted.value} (only at {scopes})")
        return [self.metrics[ref.key(wanted)]]

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
                stack.extend(self.get(key).dependencies)
        return [m for m in self.ordered() if m.key in wanted]
