"""A judged metric's asset body: read the text its judge needs, make the calls
concurrently (within the run's budget), then score them in the core. The judge is
the `judge` resource's settings, handed in by the asset.

With no judge model configured, no call is made and every entity fails with the
reason (`mce compute` skips judged metrics unless they are asked for by name)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.context import SessionContext
from ..core.evaluate import EntityFailure, MetricBatch, evaluate_metric
from ..core.metric import PriceLookup
from ..core.metrics.judged import NO_JUDGE
from ..settings import JudgeSettings

if TYPE_CHECKING:
    from ..config import ProviderSection
    from ..providers import ProviderOptions

# run id -> that run's budget: shared by every judged asset of the run.
_BUDGETS: "OrderedDict[str, Any]" = OrderedDict()
_LOCK = threading.Lock()


def run_budget(run_id: str, ceiling: float | None):
    from ..judge import Budget

    with _LOCK:
        budget = _BUDGETS.get(run_id)
        if budget is None:
            budget = _BUDGETS[run_id] = Budget(ceiling)
            while len(_BUDGETS) > 8:
                _BUDGETS.popitem(last=False)
        elif ceiling is not None and (budget.ceiling is None or ceiling < budget.ceiling):
            budget.ceiling = ceiling
        return budget


def load_text(contexts: Mapping[str, SessionContext], knowledge_graph) -> int:
    """Read the text of the contexts that do not have it yet (once per run: the
    contexts are shared by the run's assets). Returns how many were read."""
    missing = [sid for sid, ctx in contexts.items() if ctx.text is None]
    if missing:
        texts = knowledge_graph.open().read_texts(missing)
        for sid in missing:
            contexts[sid].text = texts.get(sid, {})
    return len(missing)


def every_entity_failed(metric, contexts: Mapping[str, SessionContext], reason: str) -> MetricBatch:
    """A batch in which every entity of the metric's scope failed for one reason
    (no judge, a library not installed): nothing is written for any of them."""
    batch = MetricBatch()
    for sid, ctx in contexts.items():
        batch.values[sid] = {}
        batch.failures.extend(EntityFailure(sid, e.id, reason) for e in ctx.entities(metric.scope))
    return batch


def judge_batch(
    metric,
    contexts: Mapping[str, SessionContext],
    deps,
    prices: PriceLookup,
    knowledge_graph,
    settings: JudgeSettings,
    run_id: str,
    budget_usd: float | None,
    log,
) -> tuple[MetricBatch, dict[str, object]]:
    if not settings.configured:
        log.warning(f"{metric.key}: {NO_JUDGE}")
        return every_entity_failed(metric, contexts, NO_JUDGE), {"judge": "not configured"}
    from ..judge import collect_tasks, run_judge

    load_text(contexts, knowledge_graph)
    tasks = collect_tasks(metric, contexts)
    ceiling = budget_usd if budget_usd is not None else settings.budget_usd
    budget = run_budget(run_id, ceiling)
    judgments, stats = run_judge(tasks, settings, prices, budget)
    batch = evaluate_metric(metric, contexts, deps, prices, judgments=judgments)
    metadata: dict[str, object] = {"judge model": settings.model, **stats.as_metadata()}
    if budget.ceiling is not None:
        metadata["run budget (USD)"] = budget.ceiling
        metadata["run judge spend so far (USD)"] = round(budget.spent, 8)
    return batch, metadata


def provider_options(section: "ProviderSection") -> "ProviderOptions":
    """The providers' options from `mce_config.yaml` (`providers:`)."""
    from ..providers import ProviderOptions

    return ProviderOptions(
        topics={app: tuple(v) for app, v in section.topics.items()},
        expected_tools={app: tuple(v) for app, v in section.expected_tools.items()},
    )


def provider_batch(
    metric,
    contexts: Mapping[str, SessionContext],
    deps,
    prices: PriceLookup,
    knowledge_graph,
    settings: JudgeSettings,
    options: "ProviderOptions",
    files: Path,
    run_id: str,
    budget_usd: float | None,
    log,
) -> tuple[MetricBatch, dict[str, object]]:
    """A provider's metric (DeepEval, Ragas, Opik): its library runs on every
    entity's case (its own files under `files`), its calls through the judge's rules
    (`providers.gateway`)."""
    library_metric = metric.compute
    if not library_metric.library.available:
        reason = library_metric.library.missing
        log.error(f"{metric.key}: {reason}")
        return every_entity_failed(metric, contexts, reason), {"provider": "unavailable"}
    if library_metric.needs_judge and not settings.configured:
        log.warning(f"{metric.key}: {NO_JUDGE}")
        return every_entity_failed(metric, contexts, NO_JUDGE), {"judge": "not configured"}
    load_text(contexts, knowledge_graph)
    gateway = None
    metadata: dict[str, object] = {"library": f"{library_metric.library.distribution} {library_metric.library.version}"}
    if library_metric.needs_judge:
        from ..providers.gateway import Gateway

        ceiling = budget_usd if budget_usd is not None else settings.budget_usd
        gateway = Gateway(settings, prices, run_budget(run_id, ceiling))
    started = time.perf_counter()
    outcomes = library_metric.run_batch(metric.scope, contexts, gateway, options, settings.concurrency, files)
    if gateway is not None:
        gateway.stats.seconds += time.perf_counter() - started
    batch = evaluate_metric(metric, contexts, deps, prices, judgments=outcomes)
    if gateway is not None:
        metadata.update({"judge model": settings.model, **gateway.stats.as_metadata()})
        if gateway.budget.ceiling is not None:
            metadata["run budget (USD)"] = gateway.budget.ceiling
            metadata["run judge spend so far (USD)"] = round(gateway.budget.spent, 8)
    return batch, metadata
