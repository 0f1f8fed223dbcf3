"""The LLM judge: LiteLLM calls (`client`), the record/replay cache (`cache`) and
the spend ceiling (`budget`). Scoring, prompts and evidence are pure and live in
the core (`core.judging`, `core.metrics.judged`); this package does the I/O.

Importing this package does not import LiteLLM: only running a judge does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..core.context import SessionContext
from ..core.judging import Judgment, JudgeTask
from ..core.metric import MetricFailure, NotApplicable, PriceLookup
from ..core.metrics.judged import NO_JUDGE, judge_task
from ..settings import JudgeSettings
from .budget import Budget, BudgetExceeded

if TYPE_CHECKING:
    from .client import JudgeStats

__all__ = ["NO_JUDGE", "Budget", "BudgetExceeded", "collect_tasks", "run_judge"]


def collect_tasks(metric, contexts: Mapping[str, SessionContext]) -> list[JudgeTask]:
    """The prompts to send for one metric over the sessions; entities that do not
    apply or miss an input get no call (the metric says why when it runs)."""
    tasks = []
    for context in contexts.values():
        for entity in context.entities(metric.scope):
            try:
                task = judge_task(metric.definition, entity, context)
            except MetricFailure:
                continue
            if not isinstance(task, NotApplicable):
                tasks.append(task)
    return tasks


def run_judge(
    tasks: list[JudgeTask],
    settings: JudgeSettings,
    prices: PriceLookup | None,
    budget: Budget | None = None,
) -> tuple[dict[str, dict[str, Judgment]], "JudgeStats"]:
    """Judge the tasks concurrently: session -> entity -> judgment, and the totals."""
    from .client import JudgeClient

    client = JudgeClient(settings, prices=prices, budget=budget)
    judgments = client.run(tasks) if tasks else {}
    return judgments, client.stats
