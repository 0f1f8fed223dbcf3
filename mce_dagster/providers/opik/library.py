"""Opik's metric classes on the session's cases, with the project's judge as Opik's
`LiteLLMChatModel` (every call goes through the provider gateway). Nothing is sent
to an Opik server: tracking is off."""

from __future__ import annotations

from typing import Any

from opik.evaluation.metrics import Hallucination, Sentiment
from opik.evaluation.models import LiteLLMChatModel

from .. import Scored


def judge_model(gateway) -> LiteLLMChatModel:
    # Built while the gateway is installed: the model keeps the litellm functions it finds.
    return LiteLLMChatModel(
        model_name=gateway.litellm_model(),
        track=False,
        temperature=gateway.settings.temperature,
        api_base=gateway.settings.base_url,
        api_key=gateway.api_key,
    )


async def score(name: str, case: Any, gateway) -> Scored:
    if name == "Hallucination":
        exchange, contexts = case
        metric = Hallucination(model=judge_model(gateway), track=False)
        result = await metric.ascore(input=exchange.input, output=exchange.output, context=list(contexts) or None)
    elif name == "Sentiment":
        metric = Sentiment(track=False)  # VADER over the final answer; no model call
        result = metric.score(output=case.output)
    else:
        raise KeyError(f"opik provider has no metric {name}")
    if getattr(result, "scoring_failed", False):
        raise ValueError(f"opik could not score the case: {result.reason}")
    return Scored(score=result.value, reason=result.reason, metadata={"library": "opik", "library_metric": type(metric).__name__})
