"""GraphDeterminismScore, a Population metric: the incremental aggregate equals the
pairwise definition, and the Dagster asset folds in only new sessions."""

from __future__ import annotations

import itertools
import json

import dagster as dg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mce_dagster.core.metric import MetricValue, NotApplicable
from mce_dagster.core.metrics.population import (
    EdgeSetPopulation,
    changes_since,
    consecutive_edges,
    population_entity_id,
    session_edges,
)
from mce_dagster.core.models import result_id
from mce_dagster.definitions import build_definitions, runtime
from mce_dagster.defs.assets import asset_key
from mce_dagster.ingest import ingest_paths
from mce_dagster.evaluation import QUIET_RUN_CONFIG
from mce_dagster.synthetic import generate_rows, write_export

NAMES = ["a", "b", "c", "d"]
edge_sets = st.frozensets(st.tuples(st.sampled_from(NAMES), st.sampled_from(NAMES)), max_size=8)


def pairwise_mean(edge_sets_by_session: dict[str, frozenset]) -> tuple[int, int]:
    """The definition, pair by pair: (sum of |E_i Δ E_j|, number of pairs)."""
    sets = list(edge_sets_by_session.values())
    pairs = list(itertools.combinations(sets, 2))
    return sum(len(x ^ y) for x, y in pairs), len(pairs)


def test_edges_follow_consecutive_names():
    assert consecutive_edges(["a", "t", "a", "t"]) == {("a", "t"), ("t", "a")}
    assert consecutive_edges(["a", "a"]) == {("a", "a")}
    assert consecutive_edges(["a"]) == frozenset()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "remove"]), st.integers(0, 6), edge_sets), max_size=40))
def test_the_counts_equal_the_pairwise_definition(operations):
    """Adding, replacing (adding a counted session again) and removing sessions in
    any order leaves the sum the pairs give, and the state survives its JSON."""
    population = EdgeSetPopulation()
    truth: dict[str, frozenset] = {}
    for op, n, edges in operations:
        sid = f"s{n}"
        if op == "add":
            population.add(sid, f"digest-{hash(edges)}", edges)
            truth[sid] = edges
        else:
            assert population.remove(sid) == (sid in truth)
            truth.pop(sid, None)
        total, pairs = pairwise_mean(truth)
        assert population.pair_difference_sum() == total
        outcome = population.outcome()
        if len(truth) < 2:
            assert isinstance(outcome, NotApplicable)
        else:
            assert outcome == MetricValue(
                value=total / pairs, numerator=float(total), denominator=float(pairs),
                metadata={"sessions": len(truth), "distinct_edges": len(set().union(*truth.values()))},
            )
    restored = EdgeSetPopulation.from_json(population.to_json())
    assert restored.members == population.members and restored.counts == population.counts


def test_changes_are_new_changed_and_gone_sessions():
    population = EdgeSetPopulation()
    population.add("kept", "d1", {("a", "b")})
    population.add("changed", "d2", {("a", "b")})
    population.add("gone", "d3", set())
    changes = changes_since(population, {"kept": "d1", "changed": "d2b", "new": "d4"})
    assert changes.to_count == {"changed": "d2b", "new": "d4"}
    assert changes.to_remove == ("gone",)


def test_one_session_is_not_applicable_with_the_reason():
    population = EdgeSetPopulation()
    population.add("only", "d", {("a", "b")})
    outcome = population.outcome()
    assert isinstance(outcome, NotApplicable) and "two sessions" in outcome.reason


# -- through Dagster ------------------------------------------------------------------

POPULATION_KEY = dg.AssetKey(["Population", "GraphDeterminismScore"])


def _write_rows(path, rows):
    path.write_text(json.dumps(list(rows)))
    return path


@pytest.fixture(scope="module")
def defs(mce_home):
    return build_definitions(*runtime())


def _materialize(defs, instance):
    result = dg.materialize(
        assets=list(defs.assets), selection=[POPULATION_KEY], resources=defs.resources,
        instance=instance, run_config=QUIET_RUN_CONFIG,
    )
    assert result.success
    (event,) = [e for e in result.get_asset_materialization_events() if e.asset_key == POPULATION_KEY]
    return {k: v.value for k, v in event.event_specific_data.materialization.metadata.items()}


def _stored(kg, app):
    definition = runtime()[0].find("GraphDeterminismScore")
    rid = result_id(definition.name, definition.provider, population_entity_id(app), definition.version)
    rows = kg.backend.query("MATCH (x:MetricResult {id: $id}) RETURN properties(x) AS props", {"id": rid})
    return rows[0]["props"] if rows else None


def _full_recomputation(kg):
    """Every session's edge set from its subgraph, grouped by app, pair by pair."""
    contexts = kg.read_contexts(kg.session_ids())
    by_app: dict[str, dict[str, frozenset]] = {}
    for sid, ctx in contexts.items():
        by_app.setdefault(ctx.session.props["appName"], {})[sid] = session_edges(ctx)
    return {app: pairwise_mean(sets) for app, sets in by_app.items()}


def test_a_second_batch_is_folded_in_and_equals_the_full_recomputation(defs, kg, tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    first = ingest_paths([write_export(tmp_path / "first.json", 14, seed=11).path], kg).sessions
    # An app with one session: not applicable.
    solo_rows = [{**r, "ServiceName": "solo-app"} for r in generate_rows(1, seed=5)]
    first += ingest_paths([_write_rows(tmp_path / "solo.json", solo_rows)], kg).sessions
    meta = _materialize(defs, instance)
    assert meta["sessions_counted"] == len(first) == meta["sessions"]
    assert meta["not_applicable"] >= 1

    second = ingest_paths([write_export(tmp_path / "second.json", 9, seed=12).path], kg).sessions
    meta = _materialize(defs, instance)
    assert meta["sessions_counted"] == len(second)
    assert meta["sessions"] == len(first) + len(second)
    assert meta["sessions_removed"] == 0

    full = _full_recomputation(kg)
    applicable = {app: tp for app, tp in full.items() if tp[1] > 0}
    assert len(applicable) >= 2, "the synthetic sessions should cover several apps"
    assert meta["evaluated"] == len(applicable)
    for app, (total, pairs) in applicable.items():
        stored = _stored(kg, app)
        assert stored is not None, app
        assert (stored["numerator"], stored["denominator"]) == (total, pairs), app
        # FalkorDB replies carry doubles to 15 significant digits.
        assert stored["result"] == pytest.approx(total / pairs, rel=1e-12), app
        assert stored.get("sessionId") is None and stored["scope"] == "Population"
    assert full["solo-app"] == (0, 0) and _stored(kg, "solo-app") is None

    # Nothing new: nothing is read again.
    meta = _materialize(defs, instance)
    assert meta["sessions_counted"] == 0 and meta["apps_updated"] == 0


def test_deleted_sessions_are_taken_out(defs, kg):
    instance = dg.DagsterInstance.ephemeral()
    _materialize(defs, instance)
    gone = kg.session_ids()[:3]
    kg.delete_sessions(gone)
    meta = _materialize(defs, instance)
    assert meta["sessions_removed"] == 3 and meta["sessions_counted"] == 0
    for app, (total, pairs) in _full_recomputation(kg).items():
        stored = _stored(kg, app)
        if pairs:
            assert (stored["numerator"], stored["denominator"]) == (total, pairs), app
        else:
            assert stored is None, app


def test_the_population_asset_reads_every_session_partition(defs):
    graph = defs.resolve_asset_graph()
    node = graph.get(POPULATION_KEY)
    assert node.partitions_def is None and node.group_name == "Population"
    assert set(node.parent_keys) == {dg.AssetKey(["session_context"])}
    assert asset_key(runtime()[0].resolve("GraphDeterminismScore")[0].key) == POPULATION_KEY


def test_mce_compute_runs_it_alone_in_one_unpartitioned_run(kg, tmp_path):
    from mce_dagster.runner import compute_sessions

    ids = ingest_paths([write_export(tmp_path / "third.json", 3, seed=13).path], kg).sessions
    instance = dg.DagsterInstance.ephemeral()
    outcome = compute_sessions(ids, ["GraphDeterminismScore"], instance=instance)
    assert outcome.success and len(outcome.runs) == 1
    (record,) = instance.fetch_materializations(POPULATION_KEY, limit=10).records
    assert record.run_id == outcome.runs[0]
    assert not instance.fetch_materializations(dg.AssetKey(["session_context"]), limit=1).records


def test_enabled_in_the_config_it_stays_out_of_the_session_job(tmp_path):
    from mce_dagster.config import load_config

    path = tmp_path / "mce_config.yaml"
    path.write_text("metrics:\n  Session: [Duration]\n  Population: [GraphDeterminismScore]\n")
    catalog = runtime()[0]
    config = load_config(catalog, path)
    assert [str(m.key) for m in config.enabled] == ["Population/GraphDeterminismScore", "Session/Duration"]
    job = build_definitions(catalog, config).resolve_job_def("evaluate_sessions")
    assert POPULATION_KEY not in job.asset_layer.executable_asset_keys
    assert dg.AssetKey(["Session", "Duration"]) in job.asset_layer.executable_asset_keys
