"""Ragas's metric classes (`ragas.metrics.collections`) on the session's cases, with
the project's judge as an instructor-wrapped LiteLLM client (every call goes through
the provider gateway)."""

from __future__ import annotations

import warnings
from typing import Any

import instructor
import litellm
from ragas.llms import llm_factory
from ragas.messages import AIMessage, HumanMessage, ToolCall, ToolMessage
from ragas.embeddings import LiteLLMEmbeddings
from ragas.metrics.collections import (
    AgentGoalAccuracyWithoutReference,
    AnswerRelevancy,
    Faithfulness,
    ToolCallAccuracy,
    TopicAdherence,
)

from .. import Scored
from .. import cases as session_cases


def judge_llm(gateway):
    # Built while the gateway is installed: instructor keeps the function it wraps.
    client = instructor.from_litellm(litellm.acompletion, mode=instructor.Mode.JSON)
    return llm_factory(gateway.litellm_model(), provider="litellm", client=client, adapter="litellm", temperature=gateway.settings.temperature)


def judge_embeddings(gateway) -> LiteLLMEmbeddings:
    # The gateway routes it to the judge's endpoint and retries it itself.
    return LiteLLMEmbeddings(model=gateway.settings.embedding_model, max_retries=0)


def messages(conversation: session_cases.Conversation) -> list:
    """User turns as HumanMessage, assistant turns as AIMessage with their tool calls,
    each call's output as a ToolMessage after it."""
    out: list = []
    for turn in conversation.turns:
        if turn.role == "user":
            out.append(HumanMessage(content=turn.content))
            continue
        out.append(AIMessage(content=turn.content, tool_calls=[ToolCall(name=u.name, args=u.arguments) for u in turn.tools] or None))
        for use in turn.tools:
            out.append(ToolMessage(content=use.output if use.output is not None else "(no output recorded)"))
    return out


async def score(name: str, case: Any, gateway) -> Scored:
    # Ragas warns about what it left out (a length mismatch of the tool calls): kept in the metadata.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scored = await _score(name, case, gateway)
    notes = sorted({str(w.message) for w in caught if issubclass(w.category, UserWarning) and w.filename.find("ragas") >= 0})
    if notes:
        scored = Scored(scored.score, scored.reason, scored.threshold, scored.success, {**scored.metadata, "library_warnings": notes})
    return scored


async def _score(name: str, case: Any, gateway) -> Scored:
    if name == "ToolCallAccuracy":
        conversation, expected = case
        # Ragas's comparison of the calls made against the expected sequence; no model call.
        metric = ToolCallAccuracy(strict_order=False)
        reference = [ToolCall(name=name, args=args) for name, args in map(session_cases.expected_call, expected)]
        result = await metric.ascore(user_input=messages(conversation), reference_tool_calls=reference)
    elif name == "AgentGoalAccuracy":
        metric = AgentGoalAccuracyWithoutReference(llm=judge_llm(gateway))
        result = await metric.ascore(user_input=messages(case))
    elif name == "TopicAdherence":
        conversation, topics = case
        metric = TopicAdherence(llm=judge_llm(gateway))
        result = await metric.ascore(user_input=messages(conversation), reference_topics=list(topics))
    elif name == "AnswerRelevancy":
        metric = AnswerRelevancy(llm=judge_llm(gateway), embeddings=judge_embeddings(gateway))
        result = await metric.ascore(user_input=case.input, response=case.output)
    elif name == "Faithfulness":
        exchange, contexts = case
        metric = Faithfulness(llm=judge_llm(gateway))
        result = await metric.ascore(user_input=exchange.input, response=exchange.output, retrieved_contexts=list(contexts))
    else:
        raise KeyError(f"ragas provider has no metric {name}")
    return Scored(
        score=result.value,
        reason=getattr(result, "reason", None),
        metadata={"library": "ragas", "library_metric": type(metric).__name__},
    )
