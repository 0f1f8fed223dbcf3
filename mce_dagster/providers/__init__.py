"""Metrics computed by third-party evaluation libraries (DeepEval, Ragas, Opik).

Each provider is a plugin of the entry-point group `metrics_computation_engine.plugins`
with its definitions in YAML beside its code, like any third party's. Its metric
functions are `LibraryMetric`s, in two halves around the library's calls, as the
native judged metrics are:

1. `run_batch` builds each entity's test case from the session's text, runs the
   library's own metric class on it (concurrently, bounded by
   `MCE_JUDGE_CONCURRENCY`), with the project's judge behind LiteLLM (see
   `gateway`), and keeps per entity the score, reason, and every call's tokens and
   cost, or the error;
2. calling the metric (the catalog's function) turns that outcome into a value, or
   fails the entity with the reason: a library exception, a time-out, an unparsable
   reply, a NaN score are errors, never a 0.

Importing this package imports no library: only running one of its metrics does.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import math
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.context import Node, SessionContext
from ..core.metric import EvaluationInput, MetricFailure, MetricValue, NotApplicable, Outcome, PriceLookup
from ..core.metrics.judged import NO_JUDGE
from ..core.ontology import Scope


@dataclass(frozen=True)
class Library:
    """The library a provider wraps: its import name, distribution and extra."""

    provider: str
    module: str
    distribution: str

    @property
    def install(self) -> str:
        return f"pip install 'mce-dagster[{self.provider}]'"

    @property
    def available(self) -> bool:
        return importlib.util.find_spec(self.module) is not None

    @property
    def version(self) -> str | None:
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return None

    @property
    def missing(self) -> str:
        return f"the {self.provider} provider needs the {self.distribution} library, which is not installed: {self.install}"


@dataclass
class LibraryOutcome:
    """What the library said about one entity, and what its calls cost."""

    model: str | None
    score: float | None = None
    reason: str | None = None
    threshold: float | None = None
    success: bool | None = None
    error: str | None = None
    # The metric does not apply to the entity (no case could be built), and why.
    not_applicable: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    calls: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    priced_as: str | None = None


@dataclass(frozen=True)
class Scored:
    """A library metric's own result for one case."""

    score: float | None
    reason: str | None = None
    threshold: float | None = None
    success: bool | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ProviderOptions:
    """What `mce_config.yaml` says to the providers (`providers:`), by app name with
    `default` for any other app."""

    topics: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    expected_tools: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @staticmethod
    def _for(table: Mapping[str, tuple[str, ...]], ctx: SessionContext) -> tuple[str, ...]:
        app = ctx.session.get("appName") or ctx.session.get("app_name")
        return tuple(table.get(app) or table.get("default") or ())

    def topics_for(self, ctx: SessionContext) -> tuple[str, ...]:
        return self._for(self.topics, ctx)

    def tools_for(self, ctx: SessionContext) -> tuple[str, ...]:
        return self._for(self.expected_tools, ctx)


CaseBuilder = Callable[[Node, SessionContext, ProviderOptions], Any]
Scorer = Callable[[Any, Any], Awaitable[Scored]]


class LibraryMetric:
    """The catalog's function for one library metric. `build_case(entity, ctx,
    options)` gives the library's test case, NotApplicable, or raises MetricFailure
    for a missing input; `score(case, gateway)` runs the library's metric on it
    (the gateway is None for metrics that call no model)."""

    def __init__(self, library: Library, name: str, build_case: CaseBuilder, score: Scorer, *, needs_judge: bool = True):
        self.library = library
        self.name = name
        self.build_case = build_case
        self.score = score
        self.needs_judge = needs_judge
        self.__name__ = f"{library.provider}.{name}"

    def __repr__(self) -> str:
        return f"LibraryMetric({self.__name__})"

    # -- the pure half: an outcome as a value --------------------------------------

    def __call__(self, entity: Node, inp: EvaluationInput) -> Outcome:
        if not self.library.available:
            raise MetricFailure(self.library.missing)
        if inp.judgments is None:
            raise MetricFailure(NO_JUDGE if self.needs_judge else f"{self.__name__} was not run")
        outcome = inp.judgments.get(entity.id)
        if outcome is None:
            raise MetricFailure(f"{self.__name__} was not run for this entity")
        if outcome.not_applicable is not None:
            return NotApplicable(outcome.not_applicable)
        return outcome_value(self.__name__, outcome, inp.prices)

    # -- the I/O half: the library's calls -----------------------------------------

    def cases(
        self, scope: Scope, contexts: Mapping[str, SessionContext], options: ProviderOptions
    ) -> tuple[list[tuple[str, str, Any]], dict[str, dict[str, LibraryOutcome]]]:
        """(session, entity, case) for every entity that gets a case, and the
        outcomes of those that do not (not applicable, or a missing input)."""
        out, settled = [], {}
        for sid, ctx in contexts.items():
            for entity in ctx.entities(scope):
                try:
                    case = self.build_case(entity, ctx, options)
                except MetricFailure as exc:
                    settled.setdefault(sid, {})[entity.id] = LibraryOutcome(model=None, error=str(exc))
                    continue
                if isinstance(case, NotApplicable):
                    settled.setdefault(sid, {})[entity.id] = LibraryOutcome(model=None, not_applicable=case.reason)
                else:
                    out.append((sid, entity.id, case))
        return out, settled

    def run_batch(
        self, scope: Scope, contexts: Mapping[str, SessionContext], gateway, options: ProviderOptions, concurrency: int = 8,
        files: Path | None = None,
    ):
        """session -> entity -> LibraryOutcome, for every entity of the scope; the
        library's own files under `files` (see prepare_library_environment)."""
        cases, result = self.cases(scope, contexts, options)
        if not cases:
            return result
        prepare_library_environment(files)
        model = gateway.settings.model if gateway is not None else None

        async def one(case: Any, semaphore: asyncio.Semaphore) -> LibraryOutcome:
            async with semaphore:
                if gateway is None:
                    return await _scored(self.score(case, None), model, None)
                with gateway.metering() as meter:
                    return await _scored(self.score(case, gateway), model, meter)

        async def everything() -> list[LibraryOutcome]:
            semaphore = asyncio.Semaphore(max(1, concurrency))
            return await asyncio.gather(*(one(case, semaphore) for _, _, case in cases))

        if gateway is None:
            outcomes = asyncio.run(everything())
        else:
            with gateway.installed():
                outcomes = asyncio.run(everything())
        for (sid, eid, _), outcome in zip(cases, outcomes):
            result.setdefault(sid, {})[eid] = outcome
        return result


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {(text[0] if text else '')[:300]}"


async def _scored(pending: Awaitable[Scored], model: str | None, meter) -> LibraryOutcome:
    outcome = LibraryOutcome(model=model)
    try:
        scored = await pending
    except Exception as exc:  # the library's own failure: the entity fails with it
        errors = list(getattr(meter, "errors", ()) or ())
        outcome.error = errors[-1] if errors else f"the library failed: {_describe(exc)}"
        if errors and not errors[-1].startswith(type(exc).__name__):
            outcome.error += f" (the library raised {_describe(exc)})"
    else:
        outcome.score = scored.score
        outcome.reason = scored.reason
        outcome.threshold = scored.threshold
        outcome.success = scored.success
        outcome.metadata = dict(scored.metadata)
    if meter is not None:
        outcome.calls = meter.calls
        outcome.cached = meter.cached
        outcome.prompt_tokens = meter.prompt_tokens
        outcome.completion_tokens = meter.completion_tokens
        outcome.cost = meter.cost
        outcome.priced_as = meter.priced_as
    return outcome


def outcome_value(metric: str, outcome: LibraryOutcome, prices: PriceLookup | None = None) -> MetricValue:
    """A library's outcome as a value; an error or a score that is not a finite
    number is a MetricFailure (nothing is written, never a 0)."""
    if outcome.error:
        raise MetricFailure(outcome.error)
    score = outcome.score
    if score is None or isinstance(score, bool) or not isinstance(score, (int, float)):
        raise MetricFailure(f"{metric} returned no score ({score!r})")
    if not math.isfinite(float(score)):
        raise MetricFailure(f"{metric} returned a score of {score} (the library could not score this case)")
    metadata: dict[str, Any] = {**outcome.metadata, "judge_calls": outcome.calls}
    if outcome.threshold is not None:
        metadata["threshold"] = outcome.threshold
    if outcome.success is not None:
        metadata["success"] = outcome.success
    if outcome.cached:
        metadata["cached_replies"] = outcome.cached
    if outcome.priced_as:
        metadata["priced_as"] = outcome.priced_as
    return MetricValue(
        value=float(score),
        reasoning=outcome.reason or None,
        metadata=metadata,
        evaluation_model=outcome.model if outcome.calls or outcome.cached else None,
        evaluation_method=metric.split(".", 1)[0],
        evaluation_prompt_tokens=outcome.prompt_tokens,
        evaluation_completion_tokens=outcome.completion_tokens,
        evaluation_cost=outcome.cost,
    )


def prepare_library_environment(files: Path | None = None) -> None:
    """Before a library is imported: no telemetry, no files in the working directory
    (DeepEval's go under `files`, by default $MCE_HOME/deepeval)."""
    from ..settings import Settings, prepare_litellm_environment

    prepare_litellm_environment()
    os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "YES")
    os.environ.setdefault("DEEPEVAL_GRPC_LOGGING", "NO")
    os.environ.setdefault("DEEPEVAL_CACHE_FOLDER", str(files or Settings.from_env().mce_home / "deepeval"))
    os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
    os.environ.setdefault("OPIK_TRACK_DISABLE", "true")
    # Opik reports its errors, session text included, to Sentry unless told not to.
    os.environ.setdefault("OPIK_SENTRY_ENABLE", "false")
    os.environ.setdefault("OPIK_URL_OVERRIDE", "http://127.0.0.1:9/opik-disabled")


LIBRARIES = {
    "deepeval": Library("deepeval", "deepeval", "deepeval"),
    "ragas": Library("ragas", "ragas", "ragas"),
    "opik": Library("opik", "opik", "opik"),
}


@dataclass(frozen=True)
class ProviderStatus:
    """One provider as `mce provider list` shows it."""

    provider: str
    source: str
    metrics: tuple[str, ...]
    library: str | None = None
    library_version: str | None = None
    available: bool = True
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "source": self.source,
            "available": self.available,
            "library": self.library,
            "library_version": self.library_version,
            "reason": self.reason,
            "metrics": list(self.metrics),
        }


def provider_statuses(catalog) -> list[ProviderStatus]:
    """Every provider of the catalog, with the library behind it (if any), whether
    that library is installed, its version, and the metrics the provider brings."""
    out = []
    for provider, source in sorted(catalog.providers.items()):
        metrics = tuple(sorted(n for (p, n) in catalog.definitions if p == provider))
        libraries = {
            m.compute.library for m in catalog.metrics.values() if m.provider == provider and isinstance(m.compute, LibraryMetric)
        }
        if not libraries:
            out.append(ProviderStatus(provider, source, metrics))
            continue
        library = next(iter(libraries))
        out.append(
            ProviderStatus(
                provider,
                source,
                metrics,
                library=library.distribution,
                library_version=library.version if library.available else None,
                available=library.available,
                reason=None if library.available else library.missing,
            )
        )
    return out
