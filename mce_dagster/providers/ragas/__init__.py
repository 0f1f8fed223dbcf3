"""The Ragas provider (`pip install 'mce-dagster[ragas]'`): Ragas's own metrics over
sessions, with the project's judge as their LiteLLM-backed LLM. This module imports
no Ragas: `library` does, when one of its metrics runs."""

from __future__ import annotations

from pathlib import Path

from ...catalog.plugins import Plugin
from ...core.context import Node, SessionContext
from ...core.metric import NotApplicable
from .. import LIBRARIES, LibraryMetric, ProviderOptions
from .. import cases as session_cases

LIBRARY = LIBRARIES["ragas"]


def conversation(entity: Node, ctx: SessionContext, options: ProviderOptions):
    return session_cases.conversation(ctx)


def tool_call_accuracy(entity: Node, ctx: SessionContext, options: ProviderOptions):
    """The conversation with its tool calls, against the expected tools: from
    `mce_config.yaml` (`providers.expected_tools`), else the session's tool definitions."""
    expected = options.tools_for(ctx) or session_cases.offered_tools(ctx)
    if not expected:
        return NotApplicable("no expected tools: none configured (providers.expected_tools) and the session defines none")
    return (session_cases.conversation(ctx), expected)


def topic_adherence(entity: Node, ctx: SessionContext, options: ProviderOptions):
    topics = options.topics_for(ctx)
    if not topics:
        return NotApplicable("no reference topics for this app in mce_config.yaml (providers.topics)")
    return (session_cases.conversation(ctx), topics)


def faithfulness(entity: Node, ctx: SessionContext, options: ProviderOptions):
    contexts = session_cases.retrieval_context(ctx)
    if not contexts:
        return NotApplicable("the session has no retrieval context (no output of a retrieval tool)")
    return (session_cases.exchange(ctx), contexts)


def exchange(entity: Node, ctx: SessionContext, options: ProviderOptions):
    return session_cases.exchange(ctx)


async def _score(name, case, gateway):
    from . import library  # Ragas is imported here, and only here

    return await library.score(name, case, gateway)


METRICS = {
    "AnswerRelevancy": (exchange, True),
    "ToolCallAccuracy": (tool_call_accuracy, False),
    "AgentGoalAccuracy": (conversation, True),
    "TopicAdherence": (topic_adherence, True),
    "Faithfulness": (faithfulness, True),
}


def _metric(name: str, build, needs_judge: bool) -> LibraryMetric:
    return LibraryMetric(LIBRARY, name, build, lambda case, gateway: _score(name, case, gateway), needs_judge=needs_judge)


def plugin() -> Plugin:
    return Plugin(
        provider="ragas",
        metric_defs=Path(__file__).parent / "metric_defs",
        functions={name: _metric(name, build, judge) for name, (build, judge) in METRICS.items()},
    )
