"""What ingestion writes for one session: ontology nodes and links, independent of
where they came from (span exports) and where they go (a graph backend)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .context import Edge, Node, SessionContext
from .ontology import Label, Rel


@dataclass
class GraphLink:
    source_label: Label
    source_id: str
    rel: Rel
    target_label: Label
    target_id: str


@dataclass
class SessionGraph:
    """Everything ingestion writes for one session."""

    session_id: str
    nodes: dict[Label, list[dict[str, Any]]] = field(default_factory=dict)
    links: list[GraphLink] = field(default_factory=list)
    agents: set[str] = field(default_factory=set)
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)
    llms: dict[str, str | None] = field(default_factory=dict)
    # (execution label, id, agent/tool/llm label, structural name)
    executes: list[tuple[Label, str, Label, str]] = field(default_factory=list)
    # (execution label, id, rel, state id, content)
    states: list[tuple[Label, str, Rel, str, str]] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    # Spans placed otherwise than their rows say (a parent cycle broken): (span id, why).
    notes: list[tuple[str, str]] = field(default_factory=list)
    # Content digest of the row each span came from, so that a later ingest can
    # tell the same rows from new ones; and of the whole session.
    digests: dict[str, str] = field(default_factory=dict)
    digest: str | None = None
    # Each span as parsed (ingest.spans.span_record), kept on its node.
    records: dict[str, str] = field(default_factory=dict)
    # Rows of this session that could not be placed (kept on the Session): their
    # count, and a key for each (its digest), so that sending one again counts once.
    rows_not_placed: int = 0
    refused: set[str] = field(default_factory=set)

    def node_count(self) -> int:
        return sum(len(v) for v in self.nodes.values())

    def to_context(self) -> SessionContext:
        """The session context straight from ingestion, with no graph in between."""
        nodes = [Node(label, {k: v for k, v in props.items() if v is not None}) for label, rows in self.nodes.items() for props in rows]
        edges = [Edge(l.source_id, l.target_id) for l in self.links if l.rel is not Rel.HAS_SPAN]
        return SessionContext.build(nodes, edges)
