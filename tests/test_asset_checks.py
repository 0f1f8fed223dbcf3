"""Asset checks beside the metric assets, and the metadata a person reads: run
over synthetic sessions in the embedded graph, read back through the instance."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from mce_dagster.catalog import Plugin, load_catalog
from mce_dagster.config import load_config
from mce_dagster.core.metric import MetricValue, NotApplicable
from mce_dagster.core.ontology import Scope
from mce_dagster.definitions import build_definitions
from mce_dagster.defs.checks import COVERAGE_CHECK, PLACED_CHECK, RANGE_CHECK
from mce_dagster.defs.jobs import EVALUATE_JOB
from mce_dagster.ingest import ingest_paths
from mce_dagster.evaluation import QUIET_RUN_CONFIG, RANGE_END, RANGE_START
from test_ingest import row

PROVIDER = "checkprobe"
# A test-only metric, by session id: what it does to the session's last agent call.
PROBE = """\
name: Probe
provider: checkprobe
kind: deterministic
scopes: [AgentCall]
unit: ratio
value_range: [0, 1]
version: 1
description: Half, except where a test makes it misbehave.
caveats: Test only.
"""
SKIPS = "chk-skip"  # one entity dropped by the engine: a silent gap
OUT_OF_RANGE = "chk-range"  # returns 5.0 for one entity
NOT_APPLICABLE = "chk-na"


def probe(entity, inp):
    agents = inp.session.entities(Scope.AGENT_CALL)
    last = agents[-1].id == entity.id
    sid = inp.session.session_id
    if sid == NOT_APPLICABLE and last:
        return NotApplicable("test")
    if sid == OUT_OF_RANGE and last:
        return MetricValue(5.0)
    return MetricValue(0.5)


def session_rows(session: str) -> list[dict]:
    return [
        row(f"{session}-wf", "demo.workflow", session=session, duration_ns=4_000_000_000),
        row(f"{session}-a1", "a.agent", parent=f"{session}-wf", session=session, agent_id="a"),
        row(f"{session}-a2", "b.agent", parent=f"{session}-wf", session=session, start="2025-01-01T00:00:02Z", agent_id="b"),
    ]


@pytest.fixture(scope="module")
def sessions(kg, tmp_path_factory):
    folder = tmp_path_factory.mktemp("checks")
    rows = [r for sid in ("chk-ok", NOT_APPLICABLE, SKIPS, OUT_OF_RANGE, "chk-unplaced") for r in session_rows(sid)]
    bad = row("chk-unplaced-x", "x.chat", parent="chk-unplaced-wf", session="chk-unplaced")
    bad["Timestamp"] = "soon"  # cannot be placed
    path = folder / "sessions.json"
    path.write_text(json.dumps([*rows, bad]))
    report = ingest_paths([path], kg)
    assert report.problem_count == 1
    return sorted(report.sessions)


@pytest.fixture(scope="module")
def defs(mce_home, tmp_path_factory):
    folder = tmp_path_factory.mktemp("probe")
    (folder / "defs").mkdir()
    (folder / "defs" / "Probe.yaml").write_text(PROBE)
    catalog = load_catalog(plugins=[Plugin(PROVIDER, folder / "defs", {"Probe": probe})])
    config = folder / "mce_config.yaml"
    config.write_text("metrics:\n  Session: [Duration]\n  AgentCall: [checkprobe.Probe]\n")
    return build_definitions(catalog, load_config(catalog, config))


def run(defs, keys):
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("sessions", keys)
    result = defs.resolve_job_def(EVALUATE_JOB).execute_in_process(
        instance=instance, tags={RANGE_START: keys[0], RANGE_END: keys[-1]}, run_config=QUIET_RUN_CONFIG
    )
    assert result.success
    return instance, result


def evaluation(instance, asset: list[str], check: str):
    record = instance.get_latest_asset_check_evaluation_record(dg.AssetCheckKey(dg.AssetKey(asset), check))
    assert record is not None, (asset, check)
    return record.event.dagster_event.event_specific_data


PROBE_KEY = ["AgentCall", "checkprobe_Probe"]


def test_every_check_passes_on_well_behaved_sessions(defs, sessions):
    instance, _ = run(defs, ["chk-ok", NOT_APPLICABLE])
    for asset in (PROBE_KEY, ["Session", "Duration"]):
        for check in (COVERAGE_CHECK, RANGE_CHECK):
            e = evaluation(instance, asset, check)
            assert e.passed, (asset, check, e.description)
    coverage = evaluation(instance, PROBE_KEY, COVERAGE_CHECK)
    assert coverage.metadata["entities"].value == 4 and coverage.metadata["missing"].value == 0
    placed = evaluation(instance, ["session_context"], PLACED_CHECK)
    assert placed.passed


def test_a_silently_skipped_entity_fails_coverage_naming_the_session(defs, sessions, monkeypatch):
    from mce_dagster.defs import assets

    real = assets.evaluate_metric

    def dropping(metric, contexts, *args, **kwargs):
        batch = real(metric, contexts, *args, **kwargs)
        if metric.definition.provider == PROVIDER:
            batch.values[SKIPS].pop(f"{SKIPS}-a2")
        return batch

    monkeypatch.setattr(assets, "evaluate_metric", dropping)
    instance, _ = run(defs, ["chk-ok", SKIPS])
    e = evaluation(instance, PROBE_KEY, COVERAGE_CHECK)
    assert not e.passed
    assert e.metadata["missing"].value == 1
    assert e.metadata["sessions with missing entities"].value == SKIPS
    assert f"{SKIPS}-a2" in e.metadata["missing entities"].value
    assert SKIPS in e.description and "chk-ok" not in e.description
    assert evaluation(instance, PROBE_KEY, RANGE_CHECK).passed


def test_a_value_outside_the_range_fails_the_range_check(defs, sessions):
    instance, _ = run(defs, ["chk-ok", OUT_OF_RANGE])
    e = evaluation(instance, PROBE_KEY, RANGE_CHECK)
    assert not e.passed
    assert e.metadata["outside"].value == 1
    assert e.metadata["range"].value == "[0, 1]"
    assert OUT_OF_RANGE in e.metadata["values outside"].value and "5.0" in e.metadata["values outside"].value
    assert evaluation(instance, ["Session", "Duration"], RANGE_CHECK).passed
    # The writer refused the value: nothing stored for that entity, and coverage says so.
    coverage = evaluation(instance, PROBE_KEY, COVERAGE_CHECK)
    assert not coverage.passed and "computed but not stored" in coverage.metadata["missing entities"].value


def test_a_session_with_an_unplaced_row_is_flagged(defs, sessions):
    instance, _ = run(defs, ["chk-ok", "chk-unplaced"])
    e = evaluation(instance, ["session_context"], PLACED_CHECK)
    assert not e.passed and e.severity == dg.AssetCheckSeverity.WARN
    assert e.metadata["sessions with rows not placed"].value == "chk-unplaced"
    assert "chk-unplaced" in e.description


def test_materialization_and_definition_metadata(defs, sessions):
    instance, result = run(defs, ["chk-ok", NOT_APPLICABLE])
    graph = defs.resolve_asset_graph()
    spec = graph.get(dg.AssetKey(PROBE_KEY))
    assert spec.metadata["unit"] == "ratio" and spec.metadata["range"] == "[0, 1]" and spec.metadata["version"] == 1
    assert "Test only." in spec.metadata["caveats"].value
    event = next(e for e in result.get_asset_materialization_events() if e.asset_key == dg.AssetKey(PROBE_KEY))
    metadata = event.event_specific_data.materialization.metadata
    assert isinstance(metadata["evaluated"], dg.IntMetadataValue) and metadata["evaluated"].value == 3
    assert isinstance(metadata["not_applicable"], dg.IntMetadataValue) and metadata["not_applicable"].value == 1
    # The rest of the run's summary is on its check results, once per run, not repeated
    # on each partition's materialization.
    assert "mean" not in metadata and "results_written" not in metadata
    values = evaluation(instance, PROBE_KEY, RANGE_CHECK).metadata
    assert isinstance(values["mean"], dg.FloatMetadataValue) and values["mean"].value == pytest.approx(0.5)
    assert (values["min"].value, values["max"].value) == pytest.approx((0.5, 0.5))
    coverage = evaluation(instance, PROBE_KEY, COVERAGE_CHECK).metadata
    assert coverage["results_written"].value == 3 and coverage["results_rejected"].value == 0
