"""The judge's calls, through LiteLLM (imported here, and only when a judge runs).

Calls are async and bounded (`MCE_JUDGE_CONCURRENCY`); 429, 5xx, timeouts and
connection errors are retried with exponential back-off that honours Retry-After;
each call has a timeout. Log-probabilities are asked for by default; a model that
refuses them (a 400 or LiteLLM's UnsupportedParamsError naming them) is noted,
the call is retried without them, and that model is not asked again in this
process (nor, with a cache, in later ones). Every outcome says what happened.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.judging import Judgment, JudgeReply, JudgeTask, TokenLogprob
from ..core.metric import PriceLookup
from ..settings import JudgeSettings, prepare_litellm_environment, redact
from .budget import Budget, BudgetExceeded
from .cache import ReplyCache, cache_key

log = logging.getLogger(__name__)

TOP_LOGPROBS = 5
# Models known (in this process) to refuse log-probabilities: model -> the error.
_LOGPROBS_REJECTED: dict[str, str] = {}
# Models that refuse a set temperature (reasoning models): model -> the error.
_TEMPERATURE_REJECTED: dict[str, str] = {}


class JudgeCallError(Exception):
    """A judge call that failed for good (after its retries, or not retryable)."""


@dataclass
class JudgeStats:
    """Totals of one batch of judge calls, for the run's metadata."""

    calls: int = 0  # requests sent (retries included)
    replies: int = 0  # replies used (live or cached)
    cached: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    failed: int = 0
    over_budget: int = 0
    logprobs_rejected: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def as_metadata(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "judge calls": self.calls,
            "judge replies cached": self.cached,
            "judge retries": self.retries,
            "judge prompt tokens": self.prompt_tokens,
            "judge completion tokens": self.completion_tokens,
            "judge total tokens": self.prompt_tokens + self.completion_tokens,
            "judge cost (USD)": round(self.cost, 8),
            "judge failures": self.failed,
            "judge calls refused by the budget": self.over_budget,
            "judge seconds": round(self.seconds, 3),
        }
        if self.logprobs_rejected:
            out["logprobs rejected"] = "; ".join(f"{m}: {r}" for m, r in self.logprobs_rejected.items())
        return out


def _short(exc: BaseException) -> str:
    """A provider's error in one line, for a log line or a failure's reason; a key or
    a password it quotes (in the endpoint's URL, say) is masked."""
    text = redact(str(exc)).strip().splitlines()
    return f"{type(exc).__name__}: {(text[0] if text else '')[:300]}"


def _retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked to wait (Retry-After, retry-after-ms), if any."""
    headers = getattr(exc, "litellm_response_headers", None)
    if headers is None:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
    if not headers:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms:
            return max(0.0, float(ms) / 1000.0)
        value = headers.get("retry-after")
    except AttributeError:
        return None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time()) if when else None


def _rejects_logprobs(exc: BaseException) -> bool:
    import litellm

    if not isinstance(exc, (litellm.BadRequestError, litellm.UnsupportedParamsError)):
        return False
    return "logprob" in str(exc).lower()


def _rejects_temperature(exc: BaseException) -> bool:
    import litellm

    if not isinstance(exc, (litellm.BadRequestError, litellm.UnsupportedParamsError)):
        return False
    return "temperature" in str(exc).lower()


def _retryable(exc: BaseException) -> bool:
    import litellm

    return isinstance(
        exc,
        (
            litellm.RateLimitError,
            litellm.InternalServerError,
            litellm.ServiceUnavailableError,
            litellm.Timeout,
            litellm.APIConnectionError,
        ),
    ) or (getattr(exc, "status_code", None) or 0) >= 500


class JudgeClient:
    """Sends judge tasks; one instance per batch of work (it holds the semaphore)."""

    # Seconds of the first back-off; doubled per retry, with jitter, capped.
    backoff_base = 0.5
    backoff_cap = 30.0

    def __init__(
        self,
        settings: JudgeSettings,
        prices: PriceLookup | None = None,
        budget: Budget | None = None,
        cache: ReplyCache | None = None,
    ):
        if not settings.model:
            raise ValueError("JudgeClient needs a model (LLM_MODEL_NAME)")
        self.settings = settings
        self.model = settings.model
        self.prices = prices
        self.budget = budget or Budget(settings.budget_usd)
        if cache is None and settings.cache != "off" and settings.cache_path is not None:
            cache = ReplyCache(settings.cache_path)
        self.cache = cache
        self.stats = JudgeStats()
        self._observed_completion: list[int] = []

    # -- parameters --------------------------------------------------------------

    def _litellm_model(self) -> str:
        import litellm

        model = self.model
        provider = model.split("/", 1)[0] if "/" in model else None
        if self.settings.base_url and provider not in set(getattr(litellm, "provider_list", [])):
            return f"openai/{model}"  # an OpenAI-compatible endpoint serves it
        return model

    def _params(self, messages: Iterable[Mapping[str, str]], sample: int, logprobs: bool) -> dict[str, Any]:
        """What goes into the answer, hence into the cache key."""
        params: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in messages],
            "temperature": None if self.model in _TEMPERATURE_REJECTED else self.settings.temperature,
            "max_tokens": self.settings.max_tokens,
            "logprobs": logprobs,
            "sample": sample,
        }
        if logprobs:
            params["top_logprobs"] = TOP_LOGPROBS
        return params

    def _cache_key(self, params: Mapping[str, Any]) -> str:
        # The endpoint too: the same model name behind another server is another model.
        return cache_key({**params, "endpoint": self.settings.base_url})

    def logprobs_rejected(self) -> str | None:
        reason = _LOGPROBS_REJECTED.get(self.model)
        if reason is None and self.cache is not None:
            reason = self.cache.logprobs_rejected(self.model)
            if reason:
                _LOGPROBS_REJECTED[self.model] = reason
        return reason

    def _estimate(self, params: Mapping[str, Any]) -> float:
        if self.prices is None:
            return 0.0
        price = self.prices.price(self.model)
        prompt = sum(len(m.get("content") or "") for m in params["messages"]) / 3.5
        completion = (
            sum(self._observed_completion) / len(self._observed_completion) if self._observed_completion else min(200, self.settings.max_tokens)
        )
        return prompt * price.input_per_token + completion * price.output_per_token

    def _cost(self, reply: JudgeReply) -> float:
        if self.prices is None:
            return 0.0
        price = self.prices.price(self.model)
        return reply.prompt_tokens * price.input_per_token + reply.completion_tokens * price.output_per_token

    # -- one call ----------------------------------------------------------------

    async def _send(self, params: Mapping[str, Any]) -> JudgeReply:
        import litellm

        kwargs: dict[str, Any] = {
            "model": self._litellm_model(),
            "messages": params["messages"],
            "max_tokens": params["max_tokens"],
            "timeout": self.settings.timeout,
            "num_retries": 0,  # retried here, honouring Retry-After
            "max_retries": 0,
        }
        if params["temperature"] is not None:
            kwargs["temperature"] = params["temperature"]
        if params["logprobs"]:
            kwargs["logprobs"] = True
            kwargs["top_logprobs"] = params["top_logprobs"]
        if self.settings.base_url:
            kwargs["api_base"] = self.settings.base_url
        if self.settings.api_key:
            kwargs["api_key"] = self.settings.api_key
        elif self.settings.base_url:
            kwargs["api_key"] = "none"  # local endpoints take no key, the client wants one
        self.stats.calls += 1
        response = await asyncio.wait_for(litellm.acompletion(**kwargs), timeout=self.settings.timeout + 10)
        choice = response.choices[0]
        text = choice.message.content or ""
        tokens = None
        content = getattr(getattr(choice, "logprobs", None), "content", None)
        if content:
            tokens = tuple(
                TokenLogprob(
                    t.token,
                    float(t.logprob),
                    tuple((p.token, float(p.logprob)) for p in (t.top_logprobs or ())),
                )
                for t in content
            )
        usage = getattr(response, "usage", None)
        return JudgeReply(
            text=text,
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            logprobs=tokens,
        )

    async def _call_with_retries(self, params: Mapping[str, Any]) -> JudgeReply:
        attempt = 0
        while True:
            try:
                return await self._send(params)
            except Exception as exc:
                if _rejects_logprobs(exc) and params["logprobs"]:
                    raise
                if _rejects_temperature(exc) and params["temperature"] is not None:
                    # A reasoning model takes only its own temperature: noted, not silent.
                    _TEMPERATURE_REJECTED[self.model] = _short(exc)
                    log.warning("judge model %s refuses temperature=%s; using its default", self.model, params["temperature"])
                    params = {**params, "temperature": None}
                    continue
                if not _retryable(exc) and not isinstance(exc, asyncio.TimeoutError):
                    raise JudgeCallError(f"judge call failed: {_short(exc)}") from exc
                if attempt >= self.settings.retries:
                    raise JudgeCallError(
                        f"judge call failed after {attempt + 1} attempt(s): {_short(exc)}"
                    ) from exc
                wait = _retry_after(exc)
                if wait is None:
                    wait = min(self.backoff_cap, self.backoff_base * 2**attempt) * (0.5 + random.random() / 2)
                else:
                    wait = min(wait, self.backoff_cap * 4)
                attempt += 1
                self.stats.retries += 1
                log.info("judge call retried in %.2f s (attempt %d): %s", wait, attempt + 1, _short(exc))
                await asyncio.sleep(wait)

    async def _reply(self, messages, sample: int, want_logprobs: bool) -> tuple[JudgeReply, str | None]:
        """One sample: from the cache or the model. Returns the reply and, when the
        model refused log-probabilities, the reason."""
        rejected = self.logprobs_rejected() if want_logprobs else None
        logprobs = want_logprobs and rejected is None
        params = self._params(messages, sample, logprobs)
        key = self._cache_key(params)
        mode = self.settings.cache if self.cache is not None else "off"
        if mode in ("live", "replay"):
            hit = self.cache.get(key)
            if hit is not None:
                self.stats.cached += 1
                return hit, rejected
            if mode == "replay":
                raise JudgeCallError("no recorded reply for this call (MCE_JUDGE_CACHE=replay: a miss is an error)")
        estimate = self._estimate(params)
        self.budget.reserve(estimate)
        actual = 0.0
        try:
            try:
                reply = await self._call_with_retries(params)
            except Exception as exc:
                if not (logprobs and _rejects_logprobs(exc)):
                    raise
                rejected = _short(exc)
                _LOGPROBS_REJECTED[self.model] = rejected
                self.stats.logprobs_rejected[self.model] = rejected
                if self.cache is not None and mode in ("live", "record"):
                    self.cache.record_logprobs_rejected(self.model, rejected)
                log.warning("judge model %s refuses log-probabilities (%s); retrying without them", self.model, rejected)
                params = self._params(messages, sample, False)
                key = self._cache_key(params)
                reply = await self._call_with_retries(params)
            actual = self._cost(reply)
        finally:
            self.budget.settle(estimate, actual)
        self._observed_completion.append(reply.completion_tokens)
        if self.cache is not None and mode in ("live", "record"):
            self.cache.put(key, self.model, reply)
        return reply, rejected

    async def judge(self, task: JudgeTask, semaphore: asyncio.Semaphore) -> Judgment:
        """Every sample of one task."""
        want = self.settings.logprobs
        replies: list[JudgeReply] = []
        rejected: str | None = None
        async with semaphore:
            for sample in range(self.settings.samples):
                try:
                    reply, why = await self._reply(task.messages, sample, want)
                except BudgetExceeded as exc:
                    self.stats.over_budget += 1
                    return Judgment(self.model, tuple(replies), error=str(exc), logprobs_requested=want, calls=len(replies))
                except (JudgeCallError, asyncio.TimeoutError) as exc:
                    self.stats.failed += 1
                    reason = str(exc) if isinstance(exc, JudgeCallError) else f"judge call timed out after {self.settings.timeout} s"
                    return Judgment(self.model, tuple(replies), error=reason, logprobs_requested=want, calls=len(replies))
                rejected = rejected or why
                replies.append(reply)
                self.stats.replies += 1
                self.stats.prompt_tokens += reply.prompt_tokens
                self.stats.completion_tokens += reply.completion_tokens
                self.stats.cost += self._cost(reply)
        return Judgment(self.model, tuple(replies), logprobs_requested=want, logprobs_rejected=rejected, calls=len(replies))

    async def judge_all(self, tasks: Iterable[JudgeTask]) -> dict[str, dict[str, Judgment]]:
        semaphore = asyncio.Semaphore(self.settings.concurrency)
        tasks = list(tasks)
        results = await asyncio.gather(*(self.judge(t, semaphore) for t in tasks))
        out: dict[str, dict[str, Judgment]] = {}
        for task, judgment in zip(tasks, results):
            out.setdefault(task.session_id, {})[task.entity_id] = judgment
        return out

    def run(self, tasks: Iterable[JudgeTask]) -> dict[str, dict[str, Judgment]]:
        """Judge every task, concurrently; session -> entity -> judgment."""
        prepare_litellm_environment()
        import litellm

        litellm.suppress_debug_info = True
        started = time.perf_counter()
        try:
            return asyncio.run(self.judge_all(tasks))
        finally:
            self.stats.seconds += time.perf_counter() - started


def forget_logprob_rejections() -> None:
    """For tests: forget which models refused log-probabilities."""
    _LOGPROBS_REJECTED.clear()
    _TEMPERATURE_REJECTED.clear()
