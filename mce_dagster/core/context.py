"""The session context: one session's execution subgraph, held in memory.

Metric functions read only this. It is built from plain node and edge records, so
it does not care whether they came from Neo4j, FalkorDB or an ingestion batch.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .ontology import CALL_LABELS, Label, Scope
from .recorded import NOTHING_INFERRED, Provenance, cleaned, reconcile, writes_defaults

if TYPE_CHECKING:
    from .text import CallText


@dataclass(frozen=True, slots=True)
class Node:
    """One execution node (Session, a call, or a non-call Span)."""

    label: Label
    props: Mapping[str, Any]

    @property
    def id(self) -> str:
        return self.props["id"]

    @property
    def name(self) -> str:
        return self.props.get("name") or ""

    @property
    def start_ns(self) -> int:
        exact = self.props.get("startTimeUnixNano")
        return int(exact) if exact is not None else round(float(self.props["startTime"]) * 1e9)

    @property
    def end_ns(self) -> int:
        exact = self.props.get("endTimeUnixNano")
        return int(exact) if exact is not None else round(float(self.props["endTime"]) * 1e9)

    @property
    def start(self) -> float:
        return self.start_ns / 1e9

    @property
    def end(self) -> float:
        return self.end_ns / 1e9

    @property
    def success(self) -> bool | None:
        return self.props.get("success")

    def get(self, key: str, default: Any = None) -> Any:
        value = self.props.get(key)
        return default if value is None else value

    @property
    def actor_name(self) -> str:
        """The name used in interaction sequences: agent name or tool name."""
        if self.label is Label.AGENT_CALL:
            return self.props.get("agentName") or self.name
        if self.label is Label.TOOL_CALL:
            return self.props.get("toolName") or self.name
        return self.name


@dataclass(frozen=True, slots=True)
class Edge:
    source: str
    target: str


class SessionContextError(ValueError):
    """A session subgraph that cannot be evaluated (no session node, broken link)."""


@dataclass
class SessionContext:
    session: Node
    nodes: dict[str, Node]
    # Call links (has*Call) from parent id to child ids; non-call spans are kept apart.
    children: dict[str, list[str]]
    spans: list[Node] = field(default_factory=list)
    # The text of each call (states, messages, tool definitions) by node id: read
    # from the graph only when a judged metric needs it, None until then.
    text: "Mapping[str, CallText] | None" = field(default=None, repr=False)
    # What the reading inferred instead of read (see core.recorded).
    provenance: Provenance = NOTHING_INFERRED
    _beneath_cache: dict[str, tuple[Node, ...]] = field(default_factory=dict, repr=False)
    _parents: dict[str, list[str]] | None = field(default=None, repr=False)

    @property
    def session_id(self) -> str:
        return self.session.id

    @classmethod
    def build(cls, nodes: Iterable[Node], edges: Iterable[Edge]) -> "SessionContext":
        nodes = list(nodes)
        sessions = [n for n in nodes if n.label is Label.SESSION]
        if not sessions:
            raise SessionContextError("no Session node in the context")
        if any(s.id != sessions[0].id for s in sessions):
            raise SessionContextError(f"two sessions in one context: {sessions[0].id!r} and {sessions[-1].id!r}")
        written_by_normalizer = writes_defaults(sessions[0])
        by_id: dict[str, Node] = {}
        session: Node | None = None
        spans: list[Node] = []
        for node in nodes:
            node = cleaned(node, written_by_normalizer=written_by_normalizer)
            if node.label is Label.SESSION:
                session = node
            elif node.label is Label.SPAN:
                spans.append(node)
                continue
            by_id[node.id] = node
        assert session is not None
        calls = [n for n in by_id.values() if n.label is not Label.SESSION]
        edges, provenance = reconcile(session, calls, edges)
        children: dict[str, list[str]] = defaultdict(list)
        for edge in edges:
            if edge.source in by_id and edge.target in by_id:
                children[edge.source].append(edge.target)
        for ids in children.values():
            ids.sort(key=lambda i: (by_id[i].start, i))
        return cls(session=session, nodes=by_id, children=dict(children), spans=spans, provenance=provenance)

    def unknown_beneath(self, entity: Node, label: Label) -> str | None:
        """Why the calls of `label` beneath an agent call are not known, or None.
        Some calls of the session may be placed under no agent call (core.recorded);
        one whose time overlaps this agent call's may be its own. One outside it is
        not: an agent's calls happen while it runs."""
        unplaced = self.provenance.unplaced.get(label, ())
        if entity.label is not Label.AGENT_CALL or not unplaced:
            return None
        overlapping = [i for i in unplaced if self.nodes[i].start < entity.end and entity.start < self.nodes[i].end]
        if not overlapping:
            return None
        return (
            f"{len(overlapping)} {label} call(s) while this agent call ran could be placed under no agent call "
            f"(no link in the graph, and neither span ancestry nor time containment places them, "
            f"first: {overlapping[0]}): what this agent call holds is not known"
        )

    def inferred_note(self, entity: Node, label: Label | None = None) -> str | None:
        """A reasoning line for a result that counted calls reached through links the
        reading inferred (see core.recorded), or None when it read them all."""
        inferred = self.provenance.inferred
        if not inferred or entity.label is Label.SESSION:
            return None
        found = [n for n in self.beneath(entity, label) if n.id in inferred]
        if not found:
            return None
        hows = sorted({inferred[n.id][1] for n in found})
        return f"{len(found)} call(s) beneath linked by inference ({', '.join(hows)}): the graph has no has*Call link for them"

    def calls(self, label: Label) -> list[Node]:
        """All calls of one label in the session, ordered by start time."""
        found = [n for n in self.nodes.values() if n.label is label]
        found.sort(key=lambda n: (n.start, n.id))
        return found

    def beneath(self, entity: Node, label: Label | None = None) -> tuple[Node, ...]:
        """Calls reachable from `entity` through has*Call links (not the entity
        itself), each once, ordered by start time. The Session reaches every
        call of the session, linked or not."""
        if entity.id not in self._beneath_cache:
            if entity.label is Label.SESSION:
                reached = [n for n in self.nodes.values() if n.label is not Label.SESSION]
            else:
                seen: set[str] = set()
                stack = list(self.children.get(entity.id, ()))
                while stack:
                    node_id = stack.pop()
                    if node_id in seen or node_id == entity.id:
                        continue
                    seen.add(node_id)
                    stack.extend(self.children.get(node_id, ()))
                reached = [self.nodes[i] for i in seen]
            reached.sort(key=lambda n: (n.start, n.id))
            self._beneath_cache[entity.id] = tuple(reached)
        found = self._beneath_cache[entity.id]
        if label is None:
            return found
        return tuple(n for n in found if n.label is label)

    def nearest_agent(self, call: Node) -> Node | None:
        """The closest AgentCall above `call` through has*Call links, if any."""
        if self._parents is None:
            parents: dict[str, list[str]] = defaultdict(list)
            for parent_id, child_ids in self.children.items():
                for child_id in child_ids:
                    parents[child_id].append(parent_id)
            self._parents = parents
        frontier, seen = list(self._parents.get(call.id, ())), set()
        while frontier:
            candidates = sorted(
                (self.nodes[i] for i in frontier if i not in seen),
                key=lambda n: (-n.start, n.id),
            )
            agents = [n for n in candidates if n.label is Label.AGENT_CALL]
            if agents:
                return agents[0]
            seen.update(frontier)
            frontier = [p for n in candidates for p in self._parents.get(n.id, ())]
        return None

    def entities(self, scope: Scope) -> list[Node]:
        """The nodes a metric of this scope is evaluated on."""
        if scope is Scope.SESSION:
            return [self.session]
        if scope is Scope.POPULATION:
            return []  # evaluated over many sessions at once (core.metrics.population)
        return self.calls(Label(scope.value))

    def all_spans(self) -> list[Node]:
        """Every span of the session: calls and non-call spans (for its extent)."""
        return [n for n in self.nodes.values() if n.label in CALL_LABELS] + self.spans
