"""One asset per metric and scope, generated from the catalog.

The asset graph is the metric dependency graph: every metric asset reads
`session_context`, and the assets of the metrics in its `depends_on`.
"""


import json
from typing import TYPE_CHECKING, Optional

import dagster as dg

from ..catalog import CatalogMetric
from ..core.context import SessionContext
from ..core.evaluate import evaluate_metric
from ..core.metric import DependencyKey
from ..core.models import MetricNode
from ..core.ontology import Label
from ..core.summary import summarize_values
from ..errors import UnknownSessionError
from .checks import coverage_result, markdown_table, metric_check_specs, placed_result, range_result, range_text, session_check_specs
from .io_managers import METRIC_METADATA_KEY, stored_in_run
from .partitions import sessions_partitions
from .judging import judge_batch, provider_batch
from .resources import JUDGE, KNOWLEDGE_GRAPH, LOCAL_FILES, PRICES, KnowledgeGraphResource

if TYPE_CHECKING:
    from ..providers import ProviderOptions

SESSION_CONTEXT_KEY = dg.AssetKey(["session_context"])
METRIC_IO_MANAGER = "metric_io_manager"
SESSION_CONTEXT_IO_MANAGER = "session_context_io_manager"
JUDGE_POOL = "judge"


class JudgeRunConfig(dg.Config):
    """Run config of a judged metric asset. The budget is per run, shared by every
    judged asset of the run (the smallest ceiling given wins)."""

    budget_usd: Optional[float] = None


def asset_key(key: DependencyKey) -> dg.AssetKey:
    return dg.AssetKey([key.scope.value, key.asset_name])


@dg.asset(
    key=SESSION_CONTEXT_KEY,
    partitions_def=sessions_partitions,
    io_manager_key=SESSION_CONTEXT_IO_MANAGER,
    backfill_policy=dg.BackfillPolicy.single_run(),
    group_name="sessions",
    code_version="1",
    check_specs=session_check_specs(SESSION_CONTEXT_KEY),
)
def session_context(context: dg.AssetExecutionContext, knowledge_graph: KnowledgeGraphResource):
    """Each session's execution subgraph, read from the knowledge graph in one round
    trip per batch. Every metric reads it."""
    keys = list(context.partition_keys)
    with knowledge_graph.retrying(context):
        contexts = knowledge_graph.open().read_contexts(keys)
    absent = [k for k in keys if k not in contexts]
    if absent:
        raise dg.Failure(str(UnknownSessionError(absent)), metadata={"absent": absent[:100]})
    calls = {label.value: sum(len(c.calls(label)) for c in contexts.values()) for label in (Label.AGENT_CALL, Label.LLM_CALL, Label.TOOL_CALL)}
    # The batch's counts go on the run's one check result, not on each partition's
    # materialization (see checks.py).
    yield dg.Output(contexts)
    yield placed_result(contexts, _typed({"sessions": len(contexts), **{f"{k} nodes": v for k, v in calls.items()}}))


def metric_node(metric: CatalogMetric) -> MetricNode:
    d = metric.definition
    return MetricNode(
        name=d.name,
        provider=d.provider,
        scope=[s.value for s in d.scopes],
        unit=d.unit,
        valueRange=json.dumps(list(d.value_range)),
        description=d.description.strip(),
        version=d.version,
    )


def _typed(metadata: dict[str, object]) -> dict[str, object]:
    """Numbers as int/float metadata, which the UI plots across materializations."""
    out: dict[str, object] = {}
    for k, v in metadata.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            out[k] = v
        elif isinstance(v, int):
            out[k] = dg.MetadataValue.int(v)
        else:
            out[k] = dg.MetadataValue.float(float(v))
    return out


def _summary(values: dict[str, dict]) -> dict[str, float]:
    summary = summarize_values(
        (v.value, v.numerator, v.denominator) for by_entity in values.values() for v in by_entity.values()
    )
    if summary is None:
        return {}
    out = {"mean": summary.mean, "min": summary.minimum, "max": summary.maximum}
    if summary.pooled is not None:
        out["pooled (sum num / sum den)"] = summary.pooled
    return out


def _no_options() -> "ProviderOptions":
    from ..providers import ProviderOptions

    return ProviderOptions()


def build_metric_asset(metric: CatalogMetric, provider_options: "ProviderOptions | None" = None) -> dg.AssetsDefinition:
    """The metric's asset: priced by the `prices` resource; a judged one judged by
    the `judge` resource, a provider's library metric given `provider_options`
    (`mce_config.yaml`'s `providers:`)."""
    d = metric.definition
    ins = {"session_context": dg.AssetIn(key=SESSION_CONTEXT_KEY)}
    arg_to_dep: dict[str, DependencyKey] = {}
    for i, dep in enumerate(metric.dependencies):
        ins[f"dependency_{i}"] = dg.AssetIn(key=asset_key(dep))
        arg_to_dep[f"dependency_{i}"] = dep
    description = d.description.strip() + (f"\n\nCaveats: {d.caveats.strip()}" if d.caveats else "")
    info = {
        "name": d.name,
        "provider": d.provider,
        "scope": metric.scope.value,
        "version": d.version,
        "value_range": list(d.value_range),
        "asset": str(metric.key),
        "node": metric_node(metric).model_dump(),
    }

    # A provider's library metric (DeepEval, Ragas, Opik) reads the session's text
    # like a judged one, and, when it calls a model, takes the judge's pool and budget.
    library = getattr(metric.compute, "run_batch", None) is not None
    judged = d.kind == "llm_judge" and (d.judge is not None or library)

    @dg.asset(
        key=asset_key(metric.key),
        ins=ins,
        partitions_def=sessions_partitions,
        io_manager_key=METRIC_IO_MANAGER,
        backfill_policy=dg.BackfillPolicy.single_run(),
        group_name=metric.scope.value,
        code_version=str(d.version),
        description=description,
        metadata={
            METRIC_METADATA_KEY: info,
            "unit": d.unit,
            "range": range_text(d.value_range),
            "version": d.version,
            "kind": d.kind,
            "provider": d.provider,
            **({"caveats": dg.MetadataValue.md(d.caveats.strip())} if d.caveats else {}),
        },
        check_specs=metric_check_specs(asset_key(metric.key)),
        # Judged metrics take a slot of the `judge` pool: the instance's limit on it
        # bounds judge load across runs.
        pool=JUDGE_POOL if judged else None,
        required_resource_keys={PRICES, *((KNOWLEDGE_GRAPH, JUDGE) if judged or library else ()), *((LOCAL_FILES,) if library else ())},
        config_schema=JudgeRunConfig.to_config_schema() if judged else None,
    )
    def compute(context: dg.AssetExecutionContext, session_context: dict[str, SessionContext], **dependencies):
        deps = {arg_to_dep[name]: results for name, results in dependencies.items()}
        judge_metadata: dict[str, object] = {}
        resources = context.resources
        prices = resources.prices.table()
        if library:
            config = context.op_execution_context.op_config or {}
            with resources.knowledge_graph.retrying(context):
                batch, judge_metadata = provider_batch(
                    metric, session_context, deps, prices, resources.knowledge_graph, resources.judge.settings(),
                    provider_options or _no_options(), resources.local_files.library_files(), context.run.run_id,
                    config.get("budget_usd"), context.log,
                )
        elif judged:
            config = context.op_execution_context.op_config or {}
            with resources.knowledge_graph.retrying(context):
                batch, judge_metadata = judge_batch(
                    metric, session_context, deps, prices, resources.knowledge_graph, resources.judge.settings(),
                    context.run.run_id, config.get("budget_usd"), context.log,
                )
        else:
            batch = evaluate_metric(metric, session_context, deps, prices)
        if batch.failures:
            first = batch.failures[0]
            # A failed metric is an error, never a stored value: the others still land.
            context.log.error(
                f"{metric.key} failed on {len(batch.failures)} of {len(batch.failures) + batch.evaluated + batch.not_applicable} "
                f"entities, nothing written for them; first: {first.entity_id} (session {first.session_id}): {first.reason}"
            )
        # Dagster repeats a batch's output metadata on every partition's materialization:
        # it carries what the design asks of it (what was evaluated, not applicable,
        # failed and why; the judge's calls and cost), and the rest of the run's summary
        # goes once on the check results.
        metadata = _typed({
            "evaluated": batch.evaluated,
            "not_applicable": batch.not_applicable,
            "failed": len(batch.failures),
            **judge_metadata,
        })
        if batch.failures:
            rows = [(f.session_id, f.entity_id, f.reason) for f in batch.failures]
            metadata["failures"] = markdown_table(rows, ("session", "entity", "reason"))
        yield dg.Output(batch.values, metadata=metadata)
        # The IO manager has written the output by now: coverage counts what it stored.
        stored = stored_in_run(context.run.run_id, context.asset_key)
        written: dict[str, object] = {}
        if stored is not None:
            count = sum(len(by_entity) for by_entity in stored.values())
            written = {"results_written": count, "results_rejected": batch.evaluated - count}
        yield coverage_result(metric.scope, session_context, batch, batch.values if stored is None else stored, _typed(written))
        yield range_result(d.value_range, batch.values, _typed(_summary(batch.values)))

    return compute
