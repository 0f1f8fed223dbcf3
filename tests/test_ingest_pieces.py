"""A session may arrive in pieces (issue 10): the four real traces, their rows
shuffled and cut into pieces ingested over several calls, end as the graph one
call with all of them gives; evaluating the sessions while they grow, then once
they are whole, leaves the results a fresh evaluation of the whole sessions
gives. On the embedded FalkorDB and on Neo4j."""

from __future__ import annotations

import json
import random

import dagster as dg
import pytest

from ingest_checks import orphans
from mce_dagster.ingest import ingest_paths
from mce_dagster.runner import compute_sessions

FILES = ["multi_agent_supervisor.json", "api_noa_2.json", "gls_linear.json", "llm_single_session.json"]
PIECES = 5
# What differs between two ingests or two evaluations of the same rows.
WHEN = {"ingestedAt", "computedAt", "runId"}


@pytest.fixture(scope="module")
def kg(backend_kg):
    return backend_kg


def rows_by_session(real_traces) -> dict[str, list[dict]]:
    """Each trace's rows under its session id (the object layout, so rows that
    carry their session only as the file's key keep it)."""
    out: dict[str, list[dict]] = {}
    for name in FILES:
        data = json.loads((real_traces / name).read_text())
        if isinstance(data, dict):
            for sid, rows in data.items():
                out.setdefault(sid, []).extend(rows)
        else:
            for r in data:
                attrs = r["SpanAttributes"]
                out.setdefault(attrs.get("session.id") or attrs["execution.id"], []).append(r)
    return out


def write_pieces(tmp_path, by_session, seed: int) -> list:
    """Every row once, shuffled across all sessions, cut into PIECES files."""
    rows = [(sid, r) for sid, rs in by_session.items() for r in rs]
    random.Random(seed).shuffle(rows)
    paths = []
    for i in range(PIECES):
        piece: dict[str, list[dict]] = {}
        for sid, r in rows[i::PIECES]:
            piece.setdefault(sid, []).append(r)
        path = tmp_path / f"piece-{seed}-{i}.json"
        path.write_text(json.dumps(piece))
        paths.append(path)
    return paths


def graph_of(kg, sessions) -> tuple[set, set]:
    """The sessions' nodes (label, every property but the ingestion time) and
    links (both ends by label and id or name), read through the store."""
    nodes = kg.backend.query(
        "MATCH (n) WHERE n.sessionId IN $s OR (n:Session AND n.id IN $s) RETURN labels(n) AS l, properties(n) AS p",
        {"s": list(sessions)},
    )
    links = kg.backend.query(
        "MATCH (a)-[r]->(b) WHERE (a.sessionId IN $s OR (a:Session AND a.id IN $s)) AND NOT a:MetricResult "
        "RETURN labels(a)[0] AS al, a.id AS a, type(r) AS t, labels(b)[0] AS bl, coalesce(b.id, b.name) AS b",
        {"s": list(sessions)},
    )
    return (
        {json.dumps([n["l"], {k: v for k, v in n["p"].items() if k not in WHEN}], sort_keys=True) for n in nodes if "MetricResult" not in n["l"]},
        {json.dumps(r, sort_keys=True) for r in links},
    )


def results_of(kg, sessions) -> dict[str, dict]:
    """Result id -> its properties but when and by which run it was computed, and
    the entity it measures."""
    out = {}
    for props in kg.read_results(list(sessions)):
        out[props["id"]] = {k: v for k, v in props.items() if k not in WHEN}
    measured = kg.backend.query(
        "MATCH (x:MetricResult)-[:measures]->(e) WHERE x.sessionId IN $s RETURN x.id AS id, e.id AS e",
        {"s": list(sessions)},
    )
    for r in measured:
        out[r["id"]]["measures"] = r["e"]
    return out


def test_a_session_arriving_in_pieces_ends_as_one_call_and_evaluates_the_same(kg, real_traces, tmp_path):
    by_session = rows_by_session(real_traces)
    sessions = sorted(by_session)
    instance = dg.DagsterInstance.ephemeral()

    # The reference: every row in one call, evaluated once.
    whole = tmp_path / "whole.json"
    whole.write_text(json.dumps(by_session))
    one = ingest_paths([whole], kg)
    assert sorted(one.sessions) == sessions and one.problem_count == 0
    reference = graph_of(kg, sessions)
    assert compute_sessions(sessions, instance=instance).success
    fresh = results_of(kg, sessions)
    assert len(fresh) > 100 and all("measures" in r for r in fresh.values())
    kg.delete_sessions(sessions)
    assert graph_of(kg, sessions) == (set(), set()) and not kg.read_results(sessions)

    # The same rows in pieces, shuffled: children arrive before their parents.
    paths = write_pieces(tmp_path, by_session, seed=10)
    call_of = {}
    for i, path in enumerate(paths):
        for sid, rows in json.loads(path.read_text()).items():
            call_of.update({(sid, r["SpanId"]): i for r in rows})
    parent_of = {(sid, r["SpanId"]): r["ParentSpanId"] for sid, rows in by_session.items() for r in rows}
    early = [k for k, i in call_of.items() if call_of.get((k[0], parent_of[k]), -1) > i]
    assert len(early) > 10, "the pieces should hold children ahead of their parents"

    first = ingest_paths(paths[:2], kg)
    assert sorted(first.sessions) == sessions and first.problem_count == 0
    assert graph_of(kg, sessions) != reference
    # Evaluated while still partial: these results are to be replaced.
    assert compute_sessions(sessions, instance=instance).success
    partial = results_of(kg, sessions)
    assert partial and partial != fresh

    grown = set()
    for path in paths[2:]:
        report = ingest_paths([path], kg)
        assert report.problem_count == 0 and report.merged == report.sessions
        grown |= set(report.merged)
        assert not orphans(kg)
    assert grown == set(sessions)
    assert graph_of(kg, sessions) == reference

    # Results of calls that are gone went with them; the others still measure their call.
    kept = results_of(kg, sessions)
    assert set(kept) <= set(partial) and all("measures" in r for r in kept.values())
    assert set(kept) < set(partial), "some call measured while partial (a MASCall made for it) should be gone"

    # Re-ingesting every piece, in another order, changes nothing.
    again = ingest_paths(list(reversed(paths)), kg)
    assert again.sessions == [] and sorted(again.unchanged) == sessions and again.problem_count == 0
    assert graph_of(kg, sessions) == reference

    # Evaluated again: the results are those of a fresh evaluation of the whole
    # sessions, the ones computed while partial replaced under the same ids.
    assert compute_sessions(sessions, instance=instance).success
    final = results_of(kg, sessions)
    assert final == fresh
    replaced = set(kept) & set(final)
    assert replaced and any(kept[i]["result"] != final[i]["result"] for i in replaced)
    assert not orphans(kg)
