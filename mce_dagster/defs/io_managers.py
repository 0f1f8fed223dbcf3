"""IO managers: results go to the knowledge graph as ontology nodes.

Both handle one partition or many in one call (a run evaluates a batch of
sessions at once). Within a run, what an asset produced is kept in memory for the
assets downstream of it; across runs or processes it is read back from the graph.
"""


import json
import threading
import time
from collections import OrderedDict
from typing import Any

import dagster as dg
from pydantic import ValidationError

from ..core.context import SessionContext
from ..core.metric import MetricValue
from ..core.models import MetricNode, MetricResultNode, result_id
from ..core.ontology import Scope
from ..errors import UnknownSessionError
from .resources import KnowledgeGraphResource

METRIC_METADATA_KEY = "mce/metric"

# (run id, asset key) -> {partition key -> value}; only the last few runs are kept.
_RUN_CACHE: "OrderedDict[str, dict[tuple[str, ...], dict[str, Any]]]" = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHED_RUNS = 4


def _cache_for(run_id: str) -> dict[tuple[str, ...], dict[str, Any]]:
    with _CACHE_LOCK:
        if run_id not in _RUN_CACHE:
            _RUN_CACHE[run_id] = {}
            while len(_RUN_CACHE) > _CACHED_RUNS:
                _RUN_CACHE.popitem(last=False)
        _RUN_CACHE.move_to_end(run_id)
        return _RUN_CACHE[run_id]


def stored_in_run(run_id: str, key: dg.AssetKey) -> dict[str, Any] | None:
    """What this run's IO manager stored for an asset, if it has handled it."""
    with _CACHE_LOCK:
        return _RUN_CACHE.get(run_id, {}).get(tuple(key.path))


def _partition_keys(context: dg.InputContext | dg.OutputContext) -> list[str]:
    if not context.has_asset_partitions:
        raise dg.Failure("metric assets are partitioned by session; this run names no session partition")
    return list(context.asset_partition_keys)


def _run_id(context: dg.InputContext | dg.OutputContext) -> str | None:
    if isinstance(context, dg.OutputContext):
        return context.run_id
    upstream = context.upstream_output
    try:
        return upstream.run_id if upstream is not None else None
    except dg.DagsterInvariantViolationError:  # loading outside of a run
        return None


class SessionContextIOManager(dg.ConfigurableIOManager):
    """The graph is the store of session contexts: nothing is written, and a
    context not produced in this run is read from the graph."""

    knowledge_graph: KnowledgeGraphResource

    def handle_output(self, context: dg.OutputContext, obj: dict[str, SessionContext]) -> None:
        _cache_for(context.run_id)[tuple(context.asset_key.path)] = obj

    def load_input(self, context: dg.InputContext) -> dict[str, SessionContext]:
        keys = _partition_keys(context)
        run_id = _run_id(context)
        cached = _cache_for(run_id).get(tuple(context.asset_key.path), {}) if run_id else {}
        found = {k: cached[k] for k in keys if k in cached}
        missing = [k for k in keys if k not in found]
        if missing:
            with self.knowledge_graph.retrying(context):
                found.update(self.knowledge_graph.open().read_contexts(missing))
        absent = [k for k in keys if k not in found]
        if absent:
            raise dg.Failure(str(UnknownSessionError(absent)))
        return found


def to_result_nodes(
    metric: dict[str, Any], values: dict[str, dict[str, MetricValue]], run_id: str | None, now: float
) -> tuple[list[MetricResultNode], list[str]]:
    """Validated result nodes, and the reasons for those that do not fit."""
    nodes, rejected = [], []
    lo, hi = metric["value_range"]
    name, provider, version = metric["name"], metric["provider"], metric["version"]
    scope = Scope(metric["scope"])

    def where(session_id: str, entity_id: str) -> str:
        return f"{metric['asset']} on {entity_id} (session {session_id})"

    for session_id, by_entity in values.items():
        for entity_id, value in by_entity.items():
            number = value.value
            if not isinstance(number, (int, float)) or isinstance(number, bool):
                rejected.append(f"{where(session_id, entity_id)}: value {number!r} is not a number")
                continue
            if (lo is not None and number < lo - 1e-12) or (hi is not None and number > hi + 1e-12):
                rejected.append(f"{where(session_id, entity_id)}: value {number!r} is outside the metric's range [{lo}, {hi}]")
                continue
            prompt, completion = value.evaluation_prompt_tokens, value.evaluation_completion_tokens
            try:
                nodes.append(
                    MetricResultNode(
                        id=result_id(name, provider, entity_id, version),
                        name=name,
                        provider=provider,
                        scope=scope,
                        entityId=entity_id,
                        sessionId=session_id,
                        result=float(number),
                        reasoning=value.reasoning,
                        numerator=value.numerator,
                        denominator=value.denominator,
                        metadata=json.dumps(dict(value.metadata), sort_keys=True) if value.metadata else None,
                        evaluationModel=value.evaluation_model,
                        evaluationMethod=value.evaluation_method,
                        evaluationPromptTokenCount=prompt,
                        evaluationCompletionTokenCount=completion,
                        evaluationTotalTokenCount=prompt + completion,
                        evaluationCost=value.evaluation_cost,
                        metricVersion=version,
                        computedAt=now,
                        runId=run_id,
                    )
                )
            except ValidationError as exc:  # not finite, or a field that does not fit
                rejected.append(
                    f"{where(session_id, entity_id)}: "
                    + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                )
    return nodes, rejected


def from_result_props(props: dict[str, Any]) -> MetricValue:
    metadata = props.get("metadata")
    return MetricValue(
        value=float(props["result"]),
        numerator=props.get("numerator"),
        denominator=props.get("denominator"),
        reasoning=props.get("reasoning"),
        metadata=metadata if isinstance(metadata, dict) else {},
        evaluation_model=props.get("evaluationModel"),
        evaluation_method=props.get("evaluationMethod"),
        evaluation_prompt_tokens=int(props.get("evaluationPromptTokenCount") or 0),
        evaluation_completion_tokens=int(props.get("evaluationCompletionTokenCount") or 0),
        evaluation_cost=float(props.get("evaluationCost") or 0.0),
    )


class MetricResultIOManager(dg.ConfigurableIOManager):
    """Writes `Metric` and `MetricResult` nodes (with `ofMetricType` and
    `measures`), one statement per asset and batch, and loads them back for the
    metrics that depend on them."""

    knowledge_graph: KnowledgeGraphResource

    def handle_output(self, context: dg.OutputContext, obj: dict[str, dict[str, MetricValue]]) -> None:
        metric = context.definition_metadata[METRIC_METADATA_KEY]
        metric = metric.value if hasattr(metric, "value") else metric
        keys = set(_partition_keys(context))
        unexpected = set(obj) - keys
        if unexpected:
            raise dg.Failure(f"results for sessions outside this run: {sorted(unexpected)[:5]}")
        nodes, rejected = to_result_nodes(metric, obj, context.run_id, time.time())
        for reason in rejected:
            context.log.error(f"result not written: {reason}")
        metric_node = MetricNode.model_validate(metric["node"])
        with self.knowledge_graph.retrying(context):
            missing = self.knowledge_graph.open().write_results(metric_node, Scope(metric["scope"]), nodes)
        for entity_id in missing:
            context.log.error(f"result not written: {metric['asset']}: entity {entity_id} is not in the graph")
        not_found = set(missing)
        written = {(n.sessionId, n.entityId) for n in nodes if n.entityId not in not_found}
        kept = {sid: {e: v for e, v in by_entity.items() if (sid, e) in written} for sid, by_entity in obj.items()}
        _cache_for(context.run_id)[tuple(context.asset_key.path)] = kept

    def load_input(self, context: dg.InputContext) -> dict[str, dict[str, MetricValue]]:
        keys = _partition_keys(context)
        run_id = _run_id(context)
        cached = _cache_for(run_id).get(tuple(context.asset_key.path)) if run_id else None
        if cached is not None and all(k in cached for k in keys):
            return {k: cached[k] for k in keys}
        metric = context.upstream_output.definition_metadata[METRIC_METADATA_KEY]
        metric = metric.value if hasattr(metric, "value") else metric
        with self.knowledge_graph.retrying(context):
            rows = self.knowledge_graph.open().read_results(
                keys, name=metric["name"], provider=metric["provider"], scope=Scope(metric["scope"]), version=metric["version"]
            )
        out: dict[str, dict[str, MetricValue]] = {k: {} for k in keys}
        for props in rows:
            out.setdefault(props["sessionId"], {})[props["entityId"]] = from_result_props(props)
        return out
