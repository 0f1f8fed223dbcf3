"""Hand-made sessions for unit tests: the test states every number it expects."""

from __future__ import annotations

from mce_dagster.core.context import Edge, Node, SessionContext
from mce_dagster.core.ontology import Label


class SessionBuilder:
    def __init__(self, session_id: str = "s1"):
        self.session_id = session_id
        self.nodes: list[Node] = []
        self.edges: list[Edge] = []
        self._n = 0

    def add(self, label: Label, name: str, start: float, end: float, parent: str | None = None, **props) -> str:
        self._n += 1
        node_id = props.pop("id", f"{label.value.lower()}-{self._n}")
        data = {
            "id": node_id,
            "sessionId": self.session_id,
            "name": name,
            "startTime": start,
            "endTime": end,
            "duration": (end - start) * 1000.0,
            **props,
        }
        if label is Label.AGENT_CALL:
            data.setdefault("agentName", name)
        if label is Label.TOOL_CALL:
            data.setdefault("toolName", name)
        self.nodes.append(Node(label, data))
        if parent is not None:
            self.edges.append(Edge(parent, node_id))
        return node_id

    def link(self, parent: str, child: str) -> None:
        self.edges.append(Edge(parent, child))

    def build(self) -> SessionContext:
        spans = [n for n in self.nodes if n.label is not Label.SESSION]
        start = min((n.start for n in spans), default=0.0)
        end = max((n.end for n in spans), default=0.0)
        session = Node(
            Label.SESSION,
            {"id": self.session_id, "sessionId": self.session_id, "name": "app", "startTime": start, "endTime": end},
        )
        return SessionContext.build([session, *self.nodes], self.edges)
