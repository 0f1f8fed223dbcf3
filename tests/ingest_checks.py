"""What any ingest must leave true in the graph, read with plain queries: shared by
the ingestion rule tests and the fuzz tests."""

from __future__ import annotations

import json
from collections import defaultdict

from mce_dagster.core.ontology import CALL_LABELS, CHILD_REL, Label, Rel

OWNED = (*CALL_LABELS, Label.SPAN)
STATE_RELS = (Rel.HAS_INITIAL_STATE, Rel.HAS_FINAL_STATE)


def owned_nodes(kg) -> list[dict]:
    """Every call, span and state node: label, id, sessionId."""
    out = []
    for label in (*OWNED, Label.STATE):
        out += [
            {"label": label.value, **r}
            for r in kg.backend.query(f"MATCH (n:{label}) RETURN n.id AS id, n.sessionId AS session")
        ]
    return out


def orphans(kg) -> list[dict]:
    """Call, span and state nodes that their Session does not reach through the
    ontology's links (calls, spans, states), each link staying inside the session."""
    sessions = {r["id"] for r in kg.backend.query(f"MATCH (s:{Label.SESSION}) RETURN s.id AS id")}
    rels = [*CHILD_REL.values(), *STATE_RELS]
    edges: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    rows = kg.backend.query(
        "MATCH (a)-[r]->(b) WHERE type(r) IN $rels "
        "RETURN labels(a)[0] AS al, a.id AS a, a.sessionId AS asid, labels(b)[0] AS bl, b.id AS b, b.sessionId AS bsid",
        {"rels": [str(r) for r in rels]},
    )
    for r in rows:
        source_session = r["a"] if r["al"] == Label.SESSION.value else r["asid"]
        if source_session == r["bsid"]:
            edges[(r["al"], r["a"])].append((r["bl"], r["b"]))
    reached: set[tuple[str, str]] = set()
    todo = [(Label.SESSION.value, s) for s in sessions]
    while todo:
        node = todo.pop()
        for child in edges.get(node, ()):
            if child not in reached:
                reached.add(child)
                todo.append(child)
    return [n for n in owned_nodes(kg) if (n["label"], n["id"]) not in reached or n["session"] not in sessions]


def session_snapshot(kg, session_id: str) -> tuple[list[str], list[str]]:
    """A session's nodes (all properties) and links, comparable across ingests."""
    nodes = kg.backend.query(
        "MATCH (n) WHERE n.sessionId = $s OR (n:Session AND n.id = $s) RETURN labels(n) AS l, properties(n) AS p",
        {"s": session_id},
    )
    links = kg.backend.query(
        "MATCH (a)-[r]->(b) WHERE a.sessionId = $s OR (a:Session AND a.id = $s) "
        "RETURN labels(a)[0] AS al, a.id AS a, type(r) AS t, labels(b)[0] AS bl, coalesce(b.id, b.name) AS b",
        {"s": session_id},
    )
    return (
        sorted(json.dumps(n, sort_keys=True, default=str) for n in nodes),
        sorted(json.dumps(r, sort_keys=True) for r in links),
    )


def session_ids(kg) -> set[str]:
    return {r["id"] for r in kg.backend.query(f"MATCH (s:{Label.SESSION}) RETURN s.id AS id")}
