"""A small hand-made graph of stored results for the registry tests: three sessions
in two apps, four agent calls, and results whose every roll-up the tests state.

    session  app       start       ToolErrorRate  Duration  ToolCallCount
    s1       research  2025-03-03  1/4            1000 ms   4
    s2       research  2025-03-20  3/6            3000 ms   6
    s3       support   2025-04-02  0/2            2000 ms   2

    agent call  session  agent       ToolErrorRate
    a1          s1       researcher  1/3
    a2          s1       writer      0/1
    a3          s2       researcher  3/6
    a4          s3       triage      0/2
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

from mce_dagster.catalog import load_catalog
from mce_dagster.core.models import MetricNode, MetricResultNode, result_id
from mce_dagster.core.ontology import Label, Rel, Scope
from mce_dagster.core.session_graph import GraphLink, SessionGraph

SESSIONS = {  # id: (app, start day, tool errors/calls, duration ms)
    "s1": ("research", "2025-03-03", (1, 4), 1000.0),
    "s2": ("research", "2025-03-20", (3, 6), 3000.0),
    "s3": ("support", "2025-04-02", (0, 2), 2000.0),
}
AGENT_CALLS = {  # id: (session, agent, tool errors/calls)
    "a1": ("s1", "researcher", (1, 3)),
    "a2": ("s1", "writer", (0, 1)),
    "a3": ("s2", "researcher", (3, 6)),
    "a4": ("s3", "triage", (0, 2)),
}


def _ts(day: str, hour: int = 10) -> float:
    return datetime.fromisoformat(day).replace(hour=hour, tzinfo=timezone.utc).timestamp()


def _node(node_id: str, session: str, name: str, start: float, end: float, **extra) -> dict:
    return {"id": node_id, "sessionId": session, "name": name, "startTime": start, "endTime": end, "duration": (end - start) * 1000, **extra}


def build(kg) -> None:
    catalog = load_catalog()
    graphs = []
    for sid, (app, day, _, duration) in SESSIONS.items():
        start = _ts(day)
        end = start + duration / 1000
        g = SessionGraph(sid)
        g.nodes[Label.SESSION] = [_node(sid, sid, app, start, end, appName=app)]
        mas = f"m-{sid}"
        g.nodes[Label.MAS_CALL] = [_node(mas, sid, "workflow", start, end)]
        g.links.append(GraphLink(Label.SESSION, sid, Rel.HAS_MAS_CALL, Label.MAS_CALL, mas))
        g.nodes[Label.AGENT_CALL] = []
        for aid, (owner, agent, _) in AGENT_CALLS.items():
            if owner == sid:
                g.nodes[Label.AGENT_CALL].append(_node(aid, sid, agent, start, end, agentName=agent))
                g.links.append(GraphLink(Label.MAS_CALL, mas, Rel.HAS_AGENT_CALL, Label.AGENT_CALL, aid))
                g.agents.add(agent)
                g.executes.append((Label.AGENT_CALL, aid, Label.AGENT, agent))
        graphs.append(g)
    assert kg.write_sessions(graphs) == {}

    def write(name: str, scope: Scope, rows: list[tuple[str, str, float, float | None, float | None]]) -> None:
        d = catalog.find(name)
        node = MetricNode(
            name=d.name, provider=d.provider, scope=[s.value for s in d.scopes], unit=d.unit,
            valueRange=json.dumps(list(d.value_range)), description=d.description, version=d.version,
        )
        results = [
            MetricResultNode(
                id=result_id(d.name, d.provider, entity, d.version), name=d.name, provider=d.provider, scope=scope,
                entityId=entity, sessionId=session, result=value, numerator=num, denominator=den,
                metricVersion=d.version, computedAt=time.time(),
            )
            for entity, session, value, num, den in rows
        ]
        assert kg.write_results(node, scope, results) == []

    write("ToolErrorRate", Scope.SESSION, [(s, s, e / n, float(e), float(n)) for s, (_, _, (e, n), _) in SESSIONS.items()])
    write("ToolErrorRate", Scope.AGENT_CALL, [(a, s, e / n, float(e), float(n)) for a, (s, _, (e, n)) in AGENT_CALLS.items()])
    write("Duration", Scope.SESSION, [(s, s, d, None, None) for s, (_, _, _, d) in SESSIONS.items()])
    write("ToolCallCount", Scope.SESSION, [(s, s, float(n), None, None) for s, (_, _, (_, n), _) in SESSIONS.items()])
