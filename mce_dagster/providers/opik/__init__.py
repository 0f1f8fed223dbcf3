"""The Opik provider (`pip install 'mce-dagster[opik]'`): Opik's own metrics over
sessions, with the project's judge as their LiteLLM chat model. This module imports
no Opik: `library` does, when one of its metrics runs."""

from __future__ import annotations

from pathlib import Path

from ...catalog.plugins import Plugin
from ...core.context import Node, SessionContext
from .. import LIBRARIES, LibraryMetric, ProviderOptions
from .. import cases as session_cases

LIBRARY = LIBRARIES["opik"]


def hallucination(entity: Node, ctx: SessionContext, options: ProviderOptions):
    """The request and final answer, with the retrieval context where there is one."""
    return (session_cases.exchange(ctx), session_cases.retrieval_context(ctx))


def final_answer(entity: Node, ctx: SessionContext, options: ProviderOptions):
    return session_cases.exchange(ctx)


async def _score(name, case, gateway):
    from . import library  # Opik is imported here, and only here

    return await library.score(name, case, gateway)


METRICS = {"Hallucination": (hallucination, True), "Sentiment": (final_answer, False)}


def _metric(name: str, build, needs_judge: bool) -> LibraryMetric:
    return LibraryMetric(LIBRARY, name, build, lambda case, gateway: _score(name, case, gateway), needs_judge=needs_judge)


def plugin() -> Plugin:
    return Plugin(
        provider="opik",
        metric_defs=Path(__file__).parent / "metric_defs",
        functions={name: _metric(name, build, judge) for name, (build, judge) in METRICS.items()},
    )
