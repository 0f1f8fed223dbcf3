"""What a metric function is, what it returns, and how native ones are found by name."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .context import Node, SessionContext
from .ontology import Scope


@dataclass(frozen=True, slots=True)
class MetricValue:
    """One computed observation. Ratios carry their two components."""

    value: float
    numerator: float | None = None
    denominator: float | None = None
    reasoning: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    # Filled by metrics that call a judge; zero for deterministic ones.
    evaluation_model: str | None = None
    evaluation_method: str | None = None
    evaluation_prompt_tokens: int = 0
    evaluation_completion_tokens: int = 0
    evaluation_cost: float = 0.0


@dataclass(frozen=True, slots=True)
class NotApplicable:
    """The metric does not apply to this entity: nothing is written, and it is not a 0."""

    reason: str


class MetricFailure(Exception):
    """The metric could not be computed for this entity: nothing is written."""


Outcome = MetricValue | NotApplicable


@dataclass(frozen=True, slots=True)
class DependencyKey:
    """A metric at a scope, as named in `depends_on` (`LLMCall/Duration`)."""

    scope: Scope
    name: str
    provider: str = "native"

    @property
    def asset_name(self) -> str:
        return self.name if self.provider == "native" else f"{self.provider}_{self.name}"

    def __str__(self) -> str:
        return f"{self.scope.value}/{self.asset_name}"


class PriceLookup(Protocol):
    def price(self, model: str | None) -> "ModelPrice": ...


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """USD per token for one model, and which table entry priced it."""

    model: str
    input_per_token: float
    output_per_token: float
    cache_read_per_token: float | None
    # Set when the model was missing and another entry priced it.
    priced_as: str | None = None


class AggregationSpec(Protocol):
    """What an aggregate reads of its definition: `avg` of `LLMCall/Duration`, say."""

    @property
    def function(self) -> str: ...

    @property
    def of_key(self) -> DependencyKey: ...


class MetricSpec(Protocol):
    """What the core reads of a metric's definition. The catalog's pydantic model
    provides it; the core does not import the catalog."""

    @property
    def name(self) -> str: ...

    @property
    def aggregate(self) -> AggregationSpec | None: ...


@dataclass(frozen=True)
class EvaluationInput:
    """Everything a metric function may read: the session, its dependencies' results
    for this session (by dependency, then entity id), and the price table."""

    session: SessionContext
    dependencies: Mapping[DependencyKey, Mapping[str, MetricValue]]
    prices: PriceLookup | None = None
    # The definition being evaluated, for generic functions (aggregates).
    definition: MetricSpec | None = None
    # Judged metrics: the judge's replies for this session by entity id (see
    # core.metrics.judged); None when no judge ran.
    judgments: Mapping[str, Any] | None = None


MetricFunction = Callable[[Node, EvaluationInput], Outcome]

_NATIVE: dict[str, MetricFunction] = {}


def native_metric(name: str) -> Callable[[MetricFunction], MetricFunction]:
    """Register the native function that computes metric `name`."""

    def register(fn: MetricFunction) -> MetricFunction:
        if name in _NATIVE:
            raise ValueError(f"native metric {name!r} is registered twice")
        _NATIVE[name] = fn
        return fn

    return register


def native_functions() -> Mapping[str, MetricFunction]:
    from . import metrics  # noqa: F401  (registers the built-in functions)

    return _NATIVE
