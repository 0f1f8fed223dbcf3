"""The same traces two ways: through `mce ingest` and through the OXP platform's
normalizer (../shared/oxp/write_graph.py), evaluated by the same catalog, compared
metric by metric and entity by entity. Used by tests/test_platform_graph.py, and
as a script it prints the side-by-side table:

    python tests/platform_compare.py OWN_HOME   (NEO4J_URI etc. select the platform graph)
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from mce_dagster.core.context import SessionContext
from mce_dagster.core.evaluate import MetricBatch
from mce_dagster.core.metric import DependencyKey
from mce_dagster.core.ontology import Label, Scope


def entity_keys(context: SessionContext) -> dict[str, tuple[str, str]]:
    """entity id -> a key both graphs share: (scope, span id) for a call, the
    session's uuid for the Session, the one MASCall of the session for a MASCall."""
    bare = context.session_id.rsplit("_", 1)[-1]
    keys = {context.session.id: ("Session", bare)}
    mas = context.calls(Label.MAS_CALL)
    for node in context.nodes.values():
        if node.label is Label.MAS_CALL:
            keys[node.id] = ("MASCall", bare if len(mas) == 1 else node.get("spanId", node.id))
        elif node.label is not Label.SESSION:
            keys[node.id] = (node.label.value, node.get("spanId") or node.id)
    return keys


@dataclass(frozen=True)
class Outcome:
    """What one metric gave one entity: a value, not applicable, or a failure."""

    kind: str  # "value", "n/a", "failed"
    value: float | None = None
    reason: str | None = None

    def __str__(self) -> str:
        return f"{self.value:.6g}" if self.kind == "value" else self.kind


def outcomes(contexts: dict[str, SessionContext], batches: dict[DependencyKey, MetricBatch]):
    """(bare session, metric key, entity key) -> Outcome."""
    out: dict[tuple[str, str, tuple[str, str]], Outcome] = {}
    keys = {sid: entity_keys(c) for sid, c in contexts.items()}
    for key, batch in batches.items():
        if key.scope is Scope.POPULATION:
            continue
        name = str(key)
        for sid, values in batch.values.items():
            bare = sid.rsplit("_", 1)[-1]
            for eid, v in values.items():
                out[(bare, name, keys[sid][eid])] = Outcome("value", v.value, v.reasoning)
        for sid, ids in batch.not_applicable_ids.items():
            bare = sid.rsplit("_", 1)[-1]
            for eid in ids:
                out[(bare, name, keys[sid][eid])] = Outcome("n/a")
        for f in batch.failures:
            bare = f.session_id.rsplit("_", 1)[-1]
            out[(bare, name, keys[f.session_id][f.entity_id])] = Outcome("failed", reason=f.reason)
    return out


def shared_entities(*contexts: dict[str, SessionContext]) -> set[tuple[str, tuple[str, str]]]:
    """(bare session, entity key) of the entities every graph given holds."""
    held = [
        {(sid.rsplit("_", 1)[-1], key) for sid, c in ctx.items() for key in entity_keys(c).values()} for ctx in contexts
    ]
    return set.intersection(*held)


def differences(own, platform, shared, *, rel: float = 1e-9):
    """(session, metric, entity, own, platform) where the platform graph stored a
    value that differs from own ingest's for an entity both graphs hold, or stored
    one where own ingest had none."""
    diffs = []
    for k in sorted(set(own) | set(platform)):
        a, b = own.get(k), platform.get(k)
        if b is None or b.kind != "value" or (k[0], k[2]) not in shared:
            continue  # nothing stored (allowed where the graph lacks the data), or no same entity
        if a is None or a.kind != "value" or abs(a.value - b.value) > rel * max(1.0, abs(a.value)):
            diffs.append((*k, a, b))
    return diffs


def table(own, platform) -> list[tuple[str, str, str, str, str]]:
    """Per session and metric: entities with a value on each side, and how many
    platform values equal own ingest's."""
    rows: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for k in set(own) | set(platform):
        a, b = own.get(k), platform.get(k)
        r = rows[(k[0], k[1])]
        r[0] += bool(a and a.kind == "value")
        r[1] += bool(b and b.kind == "value")
        if a and b and a.kind == b.kind == "value" and abs(a.value - b.value) <= 1e-9 * max(1.0, abs(a.value)):
            r[2] += 1
        elif b and b.kind == "value":
            r[3] += 1
    return [(s, m, str(r[0]), str(r[1]), f"{r[2]} same, {r[3]} differ") for (s, m), r in sorted(rows.items())]


def deterministic_metrics(catalog):
    """The catalog's metrics that need no judge, dependencies first."""
    chosen, keys = [], set()
    for m in catalog.ordered():
        if m.definition.kind != "llm_judge" and all(d in keys for d in m.dependencies):
            chosen.append(m)
            keys.add(m.key)
    return chosen


if __name__ == "__main__":
    import os

    os.environ.setdefault("MODEL_PRICES_REFRESH", "false")
    import sys
    from pathlib import Path

    from mce_dagster.catalog import load_catalog
    from mce_dagster.core.evaluate import evaluate_all
    from mce_dagster.graph import open_graph
    from mce_dagster.graph.store import KnowledgeGraph, embedded_backend
    from mce_dagster.ingest import ingest_paths
    from mce_dagster.prices import load_price_table

    traces = Path(__file__).resolve().parents[2] / "shared" / "data" / "real-traces"
    metrics = deterministic_metrics(load_catalog())
    prices = load_price_table()
    own_kg = KnowledgeGraph(embedded_backend(Path(sys.argv[1])))
    report = ingest_paths(sorted(traces.glob("*.json")), own_kg)
    own_ctx = own_kg.read_contexts(report.sessions)
    own = outcomes(own_ctx, evaluate_all(metrics, own_ctx, prices))
    plat_kg = open_graph()
    plat_ctx = plat_kg.read_contexts(plat_kg.session_ids())
    plat = outcomes(plat_ctx, evaluate_all(metrics, plat_ctx, prices))
    for row in table(own, plat):
        print(" | ".join(row))
    shared = shared_entities(own_ctx, plat_ctx)
    print(f"{len(differences(own, plat, shared))} platform values differ from own ingest's")
    if "-v" in sys.argv:
        for d in differences(own, plat, shared):
            print(d[0][:8], d[1], d[2], "own", d[3], "platform", d[4])
