"""The DeepEval provider (`pip install 'mce-dagster[deepeval]'`): DeepEval's own metric
classes over sessions, with the project's judge as their LiteLLM model. This module
imports no DeepEval: `library` does, when one of its metrics runs."""

from __future__ import annotations

from pathlib import Path

from ...catalog.plugins import Plugin
from .. import LIBRARIES, LibraryMetric
from . import inputs

LIBRARY = LIBRARIES["deepeval"]


async def _score(name, case, gateway):
    from . import library  # DeepEval is imported here, and only here

    return await library.score(name, case, gateway)


def _metric(name: str, build) -> LibraryMetric:
    return LibraryMetric(LIBRARY, name, build, lambda case, gateway: _score(name, case, gateway))


METRICS = {
    "AnswerRelevancy": inputs.single_turn,
    "TaskCompletion": inputs.single_turn_with_tools,
    "ToolCorrectness": inputs.tool_correctness,
    "Bias": inputs.single_turn,
    "Toxicity": inputs.single_turn,
    "Coherence": inputs.single_turn,
    "Tonality": inputs.single_turn,
    "AnswerCorrectness": inputs.single_turn,
    "RoleAdherence": inputs.role_adherence,
    "ConversationCompleteness": inputs.conversational,
}


def plugin() -> Plugin:
    return Plugin(
        provider="deepeval",
        metric_defs=Path(__file__).parent / "metric_defs",
        functions={name: _metric(name, build) for name, build in METRICS.items()},
    )
