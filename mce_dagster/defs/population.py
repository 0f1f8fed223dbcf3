"""Population metrics as Dagster assets: one unpartitioned asset per metric, one
result per app, computed incrementally.

The asset depends on every partition of `session_context`, but does not
load them: at 100k sessions that would read the whole graph on each run. What it has
counted is kept per app in the knowledge graph, as a `PopulationState` node (the
counts and each counted session's edge set, as JSON), rather than under MCE_HOME:
every process of a deployment (webserver, daemon, run workers, CLI) reaches the same
graph, and the state is written in the same statement as the results it explains, so
the two never disagree. Each materialization lists the sessions' row digests (one
light query), reads the subgraphs of only the sessions that are new or changed since
the state was saved, and takes out the sessions no longer in the graph.
"""


import json
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import dagster as dg

from ..catalog import CatalogMetric
from ..core.context import SessionContext
from ..core.metric import MetricValue, NotApplicable
from ..core.metrics.population import (
    EdgeSetPopulation,
    changes_since,
    population_entity_id,
    session_edges,
)
from ..core.models import MetricResultNode, result_id
from ..core.ontology import Scope
from ..graph import KnowledgeGraph
from .assets import SESSION_CONTEXT_KEY, asset_key, metric_node

# Subgraphs read per round trip while counting new sessions.
READ_CHUNK = 500
# Of a session's row digest, what the state keeps: enough to tell a change, and the
# state of a 100k-session app stays a few megabytes.
DIGEST_CHARS = 16
_SHOWN_APPS = 50


@dataclass
class PopulationRun:
    """What one materialization did, app by app."""

    populations: dict[str, EdgeSetPopulation] = field(default_factory=dict)
    changed_apps: set[str] = field(default_factory=set)
    counted: int = 0
    removed: int = 0
    without_app: int = 0


def sessions_by_app(listing: Iterable[Mapping[str, object]]) -> tuple[dict[str, dict[str, str]], int]:
    """app -> session id -> digest, and how many sessions have no app."""
    by_app: dict[str, dict[str, str]] = defaultdict(dict)
    without_app = 0
    for row in listing:
        if row.get("app") is None:
            without_app += 1
        else:
            by_app[str(row["app"])][str(row["id"])] = str(row.get("digest") or "")[:DIGEST_CHARS]
    return dict(by_app), without_app


def _read_edges(kg: KnowledgeGraph, session_ids: list[str]) -> dict[str, frozenset]:
    edges: dict[str, frozenset] = {}
    for i in range(0, len(session_ids), READ_CHUNK):
        contexts: dict[str, SessionContext] = kg.read_contexts(session_ids[i : i + READ_CHUNK])
        edges.update((sid, session_edges(ctx)) for sid, ctx in contexts.items())
    return edges


def update_populations(kg: KnowledgeGraph, saved: Mapping[str, str], listing: Iterable[Mapping[str, object]]) -> PopulationRun:
    """Bring each app's saved state up to the sessions in `listing`, reading only the
    sessions that are new or changed."""
    current, without_app = sessions_by_app(listing)
    run = PopulationRun(without_app=without_app)
    pending: dict[str, dict[str, str]] = {}
    for app in sorted(set(current) | set(saved)):
        population = EdgeSetPopulation.from_json(saved[app]) if app in saved else EdgeSetPopulation()
        changes = changes_since(population, current.get(app, {}))
        for session_id in changes.to_remove:
            population.remove(session_id)
        run.populations[app] = population
        if changes.to_count or changes.to_remove or app not in saved:
            run.changed_apps.add(app)
        pending[app] = changes.to_count
        run.removed += len(changes.to_remove)
    edges = _read_edges(kg, sorted(sid for to_count in pending.values() for sid in to_count))
    for app, to_count in pending.items():
        for session_id, digest in to_count.items():
            if session_id in edges:  # else deleted since the listing: the next run sees it gone
                run.populations[app].add(session_id, digest, edges[session_id])
                run.counted += 1
            else:
                run.populations[app].remove(session_id)
    return run


def _state_row(metric: CatalogMetric, app: str, population: EdgeSetPopulation, now: float) -> dict[str, object]:
    d = metric.definition
    return {
        "id": f"{d.provider}.{d.name}/v{d.version}/{population_entity_id(app)}",
        "name": d.name,
        "provider": d.provider,
        "metricVersion": d.version,
        "app": app,
        "sessions": population.size,
        "state": population.to_json(),
        "savedAt": now,
    }


def _result_node(metric: CatalogMetric, app: str, value: MetricValue, run_id: str, now: float) -> MetricResultNode:
    d = metric.definition
    entity_id = population_entity_id(app)
    return MetricResultNode(
        id=result_id(d.name, d.provider, entity_id, d.version),
        name=d.name,
        provider=d.provider,
        scope=Scope.POPULATION,
        entityId=entity_id,
        sessionId=None,
        result=float(value.value),
        numerator=value.numerator,
        denominator=value.denominator,
        metadata=json.dumps({"app": app, **value.metadata}, sort_keys=True),
        metricVersion=d.version,
        computedAt=now,
        runId=run_id,
    )


def build_population_asset(metric: CatalogMetric) -> dg.AssetsDefinition:
    d = metric.definition
    description = d.description.strip() + (f"\n\nCaveats: {d.caveats.strip()}" if d.caveats else "")

    @dg.asset(
        key=asset_key(metric.key),
        deps=[dg.AssetDep(SESSION_CONTEXT_KEY, partition_mapping=dg.AllPartitionMapping())],
        group_name=Scope.POPULATION.value,
        code_version=str(d.version),
        description=description,
        metadata={"unit": d.unit, "kind": d.kind, "provider": d.provider, "scope": Scope.POPULATION.value},
        required_resource_keys={"knowledge_graph"},
    )
    def compute(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        now = time.time()
        with context.resources.knowledge_graph.retrying(context):
            kg = context.resources.knowledge_graph.open()
            saved = kg.read_population_states(name=d.name, provider=d.provider, version=d.version)
            run = update_populations(kg, saved, kg.session_digests())
            states, results, stale, values = [], [], [], {}
            for app in sorted(run.changed_apps):
                population = run.populations[app]
                outcome = population.outcome()
                states.append(_state_row(metric, app, population, now))
                if isinstance(outcome, NotApplicable):
                    stale.append(result_id(d.name, d.provider, population_entity_id(app), d.version))
                else:
                    results.append(_result_node(metric, app, outcome, context.run.run_id, now))
            kg.write_population(metric_node(metric), states, results, stale)
        for app, population in sorted(run.populations.items()):
            outcome = population.outcome()
            values[app] = outcome.value if isinstance(outcome, MetricValue) else outcome.reason
        evaluated = sum(1 for v in values.values() if isinstance(v, float))
        lines = [f"| {app} | {run.populations[app].size} | {v} |" for app, v in list(values.items())[:_SHOWN_APPS]]
        return dg.MaterializeResult(
            metadata={
                "apps": len(run.populations),
                "apps_updated": len(run.changed_apps),
                "sessions": sum(p.size for p in run.populations.values()),
                "sessions_counted": run.counted,
                "sessions_removed": run.removed,
                "sessions_without_app": run.without_app,
                "evaluated": evaluated,
                "not_applicable": len(values) - evaluated,
                "results_written": len(results),
                "by app": dg.MetadataValue.md("| app | sessions | value |\n|---|---|---|\n" + "\n".join(lines)),
            }
        )

    return compute
