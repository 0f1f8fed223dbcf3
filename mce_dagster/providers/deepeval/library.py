"""DeepEval's metric classes on the cases of `inputs`, with the project's judge as
their `LiteLLMModel` (every call goes through the provider gateway)."""

from __future__ import annotations

from typing import Any

from deepeval.metrics import (
    AnswerRelevancyMetric,
    BiasMetric,
    ConversationCompletenessMetric,
    GEval,
    RoleAdherenceMetric,
    TaskCompletionMetric,
    ToolCorrectnessMetric,
    ToxicityMetric,
)
from deepeval.models import LiteLLMModel
from deepeval.test_case import ConversationalTestCase, LLMTestCase, SingleTurnParams, ToolCall, Turn

from .. import Scored
from .. import cases as session_cases
from .inputs import SingleTurn

THRESHOLD = 0.5

# G-Eval criteria: the quality named, in DeepEval's own G-Eval procedure.
_GEVAL = {
    "Coherence": "Determine whether the actual output is logically structured, consistent, and easy to follow as a reply to the input.",
    "Tonality": "Determine whether the actual output keeps a professional, courteous and appropriate tone for the input.",
    "AnswerCorrectness": "Determine whether the actual output is factually correct and correctly answers the input.",
}


def judge_model(gateway) -> LiteLLMModel:
    return LiteLLMModel(
        model=gateway.litellm_model(),
        api_key=gateway.api_key,
        base_url=gateway.settings.base_url,
        temperature=gateway.settings.temperature,
    )


def tool_call(use: session_cases.ToolUseCase) -> ToolCall:
    return ToolCall(name=use.name, input_parameters=use.arguments or None, output=use.output)


def llm_case(case: SingleTurn) -> LLMTestCase:
    return LLMTestCase(
        input=case.input,
        actual_output=case.actual_output,
        tools_called=[tool_call(u) for u in case.tools_called] or None,
        expected_tools=[ToolCall(name=n) for n in case.expected_tools] or None,
        retrieval_context=list(case.retrieval_context) or None,
    )


def conversational_case(case: session_cases.Conversation) -> ConversationalTestCase:
    return ConversationalTestCase(
        turns=[Turn(role=t.role, content=t.content, tools_called=[tool_call(u) for u in t.tools] or None) for t in case.turns],
        chatbot_role=case.role,
    )


def metric(name: str, model: LiteLLMModel, case: Any):
    common = {"threshold": THRESHOLD, "model": model, "async_mode": True}
    if name == "AnswerRelevancy":
        return AnswerRelevancyMetric(include_reason=True, **common)
    if name == "TaskCompletion":
        return TaskCompletionMetric(include_reason=True, **common)
    if name == "ToolCorrectness":
        return ToolCorrectnessMetric(include_reason=True, **common)
    if name == "Bias":
        return BiasMetric(include_reason=True, **common)
    if name == "Toxicity":
        return ToxicityMetric(include_reason=True, **common)
    if name in _GEVAL:
        return GEval(
            name=name,
            criteria=_GEVAL[name],
            evaluation_params=[SingleTurnParams.INPUT, SingleTurnParams.ACTUAL_OUTPUT],
            **common,
        )
    if name == "RoleAdherence":
        return RoleAdherenceMetric(include_reason=True, **common)
    if name == "ConversationCompleteness":
        return ConversationCompletenessMetric(include_reason=True, **common)
    raise KeyError(f"deepeval provider has no metric {name}")


async def score(name: str, case: Any, gateway) -> Scored:
    test_case = conversational_case(case) if isinstance(case, session_cases.Conversation) else llm_case(case)
    measured = metric(name, judge_model(gateway), case)
    if name == "RoleAdherence" and not test_case.chatbot_role:
        raise ValueError("the session records no system prompt to take the chatbot's role from")
    await measured.a_measure(test_case, _show_indicator=False)
    return Scored(
        score=measured.score,
        reason=measured.reason,
        threshold=measured.threshold,
        success=bool(measured.success) if measured.success is not None else None,
        metadata={"library": "deepeval", "library_metric": type(measured).__name__},
    )
