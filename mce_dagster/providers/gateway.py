"""Every LiteLLM call a provider's library makes, through the project's judge rules.

While a provider evaluates, `litellm.completion`, `litellm.acompletion` and
`litellm.aembedding` are wrapped: each call a library makes (DeepEval's LiteLLMModel, Ragas through
instructor, Opik's LiteLLMChatModel) is answered from the record/replay cache or
sent with the project's time-out, retries (429, 5xx, time-outs, with back-off that
honours Retry-After) and budget, and its tokens and cost are added to the meter of
the entity being evaluated. Counting here, below the library, means nothing the
library does escapes the count, whatever it reports itself.

Calls made outside an evaluation (no meter in the context) pass through untouched,
so a native judge running in the same process is not affected.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.judging import JudgeReply
from ..core.metric import PriceLookup
from ..judge.budget import Budget
from ..judge.cache import ReplyCache, cache_key
from ..judge.client import JudgeStats, _retry_after, _retryable, _short
from ..settings import JudgeSettings, prepare_litellm_environment


@dataclass
class Meter:
    """The calls made for one entity."""

    calls: int = 0  # requests sent, retries included
    replies: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    priced_as: str | None = None
    errors: list[str] = field(default_factory=list)


_METER: contextvars.ContextVar[Meter | None] = contextvars.ContextVar("mce_provider_meter", default=None)
_PATCH_LOCK = threading.Lock()
_ACTIVE: list["Gateway"] = []
_ORIGINAL: dict[str, Any] = {}


class ProviderCallError(Exception):
    """A library's call that failed for good: the entity fails with this reason."""


def _jsonable(value: Any) -> Any:
    """Call parameters as JSON for the cache key (a pydantic response_format as its schema)."""
    schema = getattr(value, "model_json_schema", None)
    if isinstance(value, type) and callable(schema):
        return {"pydantic_schema": schema()}
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    dump = getattr(value, "model_dump", None)
    return _jsonable(dump()) if callable(dump) else repr(value)


# Parameters that do not change the answer, or that the gateway sets itself.
_TRANSPORT = {"api_key", "api_base", "base_url", "timeout", "num_retries", "max_retries", "metadata", "stream_options", "client"}


class Gateway:
    """The judge's rules for one batch of provider evaluations."""

    backoff_base = 0.5
    backoff_cap = 30.0

    def __init__(self, settings: JudgeSettings, prices: PriceLookup | None, budget: Budget | None = None):
        if not settings.model:
            raise ValueError("a provider gateway needs a judge model (LLM_MODEL_NAME)")
        self.settings = settings
        self.prices = prices
        self.budget = budget or Budget(settings.budget_usd)
        self.cache = ReplyCache(settings.cache_path) if settings.cache != "off" and settings.cache_path else None
        self.mode = settings.cache if self.cache is not None else "off"
        self.stats = JudgeStats()
        self._observed_completion: list[int] = []

    # -- what the libraries are given --------------------------------------------

    def litellm_model(self) -> str:
        """The model name as LiteLLM routes it: an OpenAI-compatible endpoint serves any name."""
        prepare_litellm_environment()
        import litellm

        return self._routed(self.settings.model)

    @property
    def api_key(self) -> str | None:
        if self.settings.api_key:
            return self.settings.api_key
        return "none" if self.settings.base_url else None  # local endpoints take no key, clients want one

    # -- one call ----------------------------------------------------------------

    def _key(self, kwargs: Mapping[str, Any]) -> str:
        params = {k: _jsonable(v) for k, v in kwargs.items() if k not in _TRANSPORT}
        params["model"] = self.settings.model
        params["caller"] = "provider"
        params["endpoint"] = self.settings.base_url  # the same model name elsewhere is another model
        return cache_key(params)

    def _prepared(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        out = dict(kwargs)
        out["model"] = self.litellm_model()
        out["timeout"] = self.settings.timeout
        out["num_retries"] = 0  # retried here, honouring Retry-After
        out["max_retries"] = 0
        if self.settings.base_url:
            out["api_base"] = self.settings.base_url
        if self.api_key:
            out["api_key"] = self.api_key
        out.pop("base_url", None)
        return out

    def _estimate(self, kwargs: Mapping[str, Any]) -> float:
        if self.prices is None:
            return 0.0
        price = self.prices.price(self.settings.model)
        prompt = len(json.dumps(_jsonable(kwargs.get("messages") or []))) / 3.5
        seen = self._observed_completion
        completion = sum(seen) / len(seen) if seen else min(200, self.settings.max_tokens)
        return prompt * price.input_per_token + completion * price.output_per_token

    def _count(self, meter: Meter, response: Any, cached: bool, model: str | None = None) -> None:
        usage = getattr(response, "usage", None)
        prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion = int(getattr(usage, "completion_tokens", 0) or 0)
        cost = 0.0
        if self.prices is not None:
            price = self.prices.price(model or self.settings.model)
            cost = prompt * price.input_per_token + completion * price.output_per_token
            meter.priced_as = price.priced_as
        meter.replies += 1
        meter.cached += cached
        meter.prompt_tokens += prompt
        meter.completion_tokens += completion
        meter.cost += cost
        self.stats.replies += 1
        self.stats.cached += cached
        self.stats.prompt_tokens += prompt
        self.stats.completion_tokens += completion
        self.stats.cost += cost
        if not cached:
            self._observed_completion.append(completion)

    def _from_cache(self, key: str) -> Any | None:
        if self.mode not in ("live", "replay"):
            return None
        hit = self.cache.get(key)
        if hit is None:
            if self.mode == "replay":
                raise ProviderCallError("no recorded reply for this call (MCE_JUDGE_CACHE=replay: a miss is an error)")
            return None
        import litellm

        return litellm.ModelResponse(**json.loads(hit.text))

    def _record(self, key: str, response: Any) -> None:
        if self.cache is None or self.mode not in ("live", "record"):
            return
        usage = getattr(response, "usage", None)
        self.cache.put(
            key,
            self.settings.model,
            JudgeReply(
                text=json.dumps(response.model_dump(), default=str),
                prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            ),
        )

    def _wait(self, exc: BaseException, attempt: int) -> float:
        import random

        wait = _retry_after(exc)
        if wait is None:
            return min(self.backoff_cap, self.backoff_base * 2**attempt) * (0.5 + random.random() / 2)
        return min(wait, self.backoff_cap * 4)

    def _give_up(self, meter: Meter, exc: BaseException, attempt: int) -> bool:
        """Whether a failed attempt is final; records why."""
        final = (not _retryable(exc) and not isinstance(exc, (asyncio.TimeoutError, TimeoutError))) or attempt >= self.settings.retries
        if final:
            reason = f"judge call failed after {attempt + 1} attempt(s): {_short(exc)}" if attempt else f"judge call failed: {_short(exc)}"
            meter.errors.append(reason)
            self.stats.failed += 1
        else:
            self.stats.retries += 1
        return final

    async def acompletion(self, original, meter: Meter, kwargs: dict[str, Any]) -> Any:
        key, hit = self._cached(meter, kwargs)
        if hit is not None:
            return hit
        estimate = self._estimate(kwargs)
        self.budget.reserve(estimate)
        response = None
        attempt = 0
        try:
            while True:
                self._attempting(meter)
                try:
                    response = await asyncio.wait_for(original(**self._prepared(kwargs)), timeout=self.settings.timeout + 10)
                    break
                except Exception as exc:
                    await asyncio.sleep(self._after_failure(meter, exc, attempt))
                    attempt += 1
            self._count(meter, response, cached=False)
        finally:
            self.budget.settle(estimate, self._cost_of(response))
        self._record(key, response)
        return response

    def completion(self, original, meter: Meter, kwargs: dict[str, Any]) -> Any:
        """The synchronous twin of `acompletion` (libraries call either)."""
        key, hit = self._cached(meter, kwargs)
        if hit is not None:
            return hit
        estimate = self._estimate(kwargs)
        self.budget.reserve(estimate)
        response = None
        attempt = 0
        try:
            while True:
                self._attempting(meter)
                try:
                    response = original(**self._prepared(kwargs))
                    break
                except Exception as exc:
                    time.sleep(self._after_failure(meter, exc, attempt))
                    attempt += 1
            self._count(meter, response, cached=False)
        finally:
            self.budget.settle(estimate, self._cost_of(response))
        self._record(key, response)
        return response

    def _cached(self, meter: Meter, kwargs: dict[str, Any]) -> tuple[str, Any | None]:
        """The call's cache key, and its recorded reply (counted) if there is one."""
        key = self._key(kwargs)
        hit = self._from_cache(key)
        if hit is not None:
            self._count(meter, hit, cached=True)
        return key, hit

    def _attempting(self, meter: Meter) -> None:
        meter.calls += 1
        self.stats.calls += 1

    def _after_failure(self, meter: Meter, exc: Exception, attempt: int) -> float:
        """Seconds to wait before the next attempt; raises when this one was final."""
        if self._give_up(meter, exc, attempt):
            raise ProviderCallError(meter.errors[-1]) from exc
        return self._wait(exc, attempt)

    async def aembedding(self, original, meter: Meter, kwargs: dict[str, Any]) -> Any:
        """An embedding request, at the judge's endpoint with the embedding model:
        retried, timed out and counted like a completion (no cache: the vectors are
        the answer and cost a fraction of a completion)."""
        model = self.settings.embedding_model
        prepared = {**self._prepared(kwargs), "model": self._routed(model)}
        attempt = 0
        while True:
            self._attempting(meter)
            try:
                response = await asyncio.wait_for(original(**prepared), timeout=self.settings.timeout + 10)
                break
            except Exception as exc:
                await asyncio.sleep(self._after_failure(meter, exc, attempt))
                attempt += 1
        self._count(meter, response, cached=False, model=model)
        self.budget.settle(0.0, self._cost_of(response, model))
        return response

    def _routed(self, model: str) -> str:
        import litellm

        provider = model.split("/", 1)[0] if "/" in model else None
        if self.settings.base_url and provider not in set(getattr(litellm, "provider_list", [])):
            return f"openai/{model}"
        return model

    def _cost_of(self, response: Any, model: str | None = None) -> float:
        if self.prices is None or response is None:
            return 0.0
        usage = getattr(response, "usage", None)
        price = self.prices.price(model or self.settings.model)
        return int(getattr(usage, "prompt_tokens", 0) or 0) * price.input_per_token + int(
            getattr(usage, "completion_tokens", 0) or 0
        ) * price.output_per_token

    # -- installing the wrappers -------------------------------------------------

    @contextlib.contextmanager
    def installed(self) -> Iterator["Gateway"]:
        """`litellm.completion` and `acompletion` wrapped while the block runs."""
        prepare_litellm_environment()
        import litellm

        litellm.suppress_debug_info = True
        with _PATCH_LOCK:
            if not _ACTIVE:
                _ORIGINAL["completion"] = litellm.completion
                _ORIGINAL["acompletion"] = litellm.acompletion
                _ORIGINAL["aembedding"] = litellm.aembedding
                litellm.completion = _completion
                litellm.acompletion = _acompletion
                litellm.aembedding = _aembedding
            _ACTIVE.append(self)
        try:
            yield self
        finally:
            with _PATCH_LOCK:
                _ACTIVE.remove(self)
                if not _ACTIVE:
                    litellm.completion = _ORIGINAL.pop("completion")
                    litellm.acompletion = _ORIGINAL.pop("acompletion")
                    litellm.aembedding = _ORIGINAL.pop("aembedding")

    @contextlib.contextmanager
    def metering(self) -> Iterator[Meter]:
        """Count the calls made in this block (and the tasks it starts) for one entity."""
        meter = Meter()
        token = _METER.set(meter)
        gateway_token = _GATEWAY.set(self)
        try:
            yield meter
        finally:
            _METER.reset(token)
            _GATEWAY.reset(gateway_token)


_GATEWAY: contextvars.ContextVar[Gateway | None] = contextvars.ContextVar("mce_provider_gateway", default=None)


def _completion(*args: Any, **kwargs: Any) -> Any:
    meter, gateway = _METER.get(), _GATEWAY.get()
    if args:
        kwargs = {"model": args[0], **({"messages": args[1]} if len(args) > 1 else {}), **kwargs}
    if meter is None or gateway is None:
        return _ORIGINAL["completion"](**kwargs)
    return gateway.completion(_ORIGINAL["completion"], meter, kwargs)


async def _acompletion(*args: Any, **kwargs: Any) -> Any:
    meter, gateway = _METER.get(), _GATEWAY.get()
    if args:
        kwargs = {"model": args[0], **({"messages": args[1]} if len(args) > 1 else {}), **kwargs}
    if meter is None or gateway is None:
        return await _ORIGINAL["acompletion"](**kwargs)
    return await gateway.acompletion(_ORIGINAL["acompletion"], meter, kwargs)


async def _aembedding(*args: Any, **kwargs: Any) -> Any:
    meter, gateway = _METER.get(), _GATEWAY.get()
    if args:
        kwargs = {"model": args[0], **kwargs}
    if meter is None or gateway is None:
        return await _ORIGINAL["aembedding"](**kwargs)
    return await gateway.aembedding(_ORIGINAL["aembedding"], meter, kwargs)
