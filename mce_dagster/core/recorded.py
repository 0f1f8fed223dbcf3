"""A session's subgraph read as what its producer recorded, not as what it defaulted.

The platform's normalizer (the OXP norm-worker's) writes the knowledge graph in a
form that differs from this project's own ingestion: a default where it had no
value (token counts 0, `success` false and duration 0 on the nodes it makes up,
empty strings for ids it lacked), and no `hasLLMCall` / `hasToolCall` link for a
call whose span does not name its agent. Read as they are, those defaults become
wrong numbers: a stored 0 tokens, an agent that made no LLM call. This module
turns them back into what is known, before any metric sees the session:

- a default is removed, so the metric reads "not recorded" (and fails or says it
  does not apply, naming why), never a measured 0;
- a call no link places hangs from the agent call that contains it: its span's
  ancestry where the graph holds it, else the one innermost agent call whose time
  contains it; such a link is recorded as inferred, and a call that neither
  places is hung from the session's first MASCall and recorded as unplaced.

Pure: plain node and edge records in, the same out, with what was inferred. On a
graph written by `mce ingest` nothing here changes anything: every call there has
its parent link and no defaulted value, and the session carries no ontology layer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .ontology import ONTOLOGY_LAYER, Label

if TYPE_CHECKING:
    from .context import Edge, Node

USAGE_PROPS = ("promptTokenCount", "completionTokenCount", "totalTokenCount")
# What the normalizer stores as the text of a state it had no text for.
NO_CONTENT = "(no content recorded)"
# Children may start a little before the span the SDK opened around them.
_SLACK_S = 1e-6
# Properties the normalizer writes as an empty string when it had no value.
_EMPTY_IS_ABSENT = ("spanId", "parentSpanId", "finishReason", "provider", "modelName", "agentName", "toolName")
# The calls a missing link is inferred for.
_PLACED_UNDER_AGENTS = (Label.LLM_CALL, Label.TOOL_CALL, Label.TASK_CALL)
# How an inferred link was found, as said in a result's reasoning.
BY_ANCESTRY = "span ancestry"
BY_TIME = "time containment"


@dataclass(frozen=True)
class Provenance:
    """What the reading of one session inferred instead of read."""

    # child call id -> (agent call or MASCall id it was hung from, how)
    inferred: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # label -> ids of the calls of that label no agent call could be found for
    unplaced: Mapping[Label, tuple[str, ...]] = field(default_factory=dict)
    # Nodes the producer made up without a span (the normalizer's MASCall per session).
    invented: frozenset[str] = frozenset()
    # Calls whose parent span the graph does not hold, in a session written by a
    # producer that drops spans: the session's extent is then unknown.
    missing_parents: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.inferred or self.unplaced or self.invented or self.missing_parents)


NOTHING_INFERRED = Provenance()


def is_placeholder_text(text: str | None) -> bool:
    """Whether a state's content is the normalizer's stand-in for no text."""
    return text is None or text.strip() in ("", NO_CONTENT)


def writes_defaults(session: "Node") -> bool:
    """Whether the session was written by the platform's normalizer, which marks
    every node with its ontology layer and writes defaults for what it lacked, and
    drops task and workflow spans. This project's ingestion does neither."""
    return session.props.get(ONTOLOGY_LAYER) is not None


def cleaned(node: "Node", *, written_by_normalizer: bool) -> "Node":
    """The node with the producer's defaults removed (the same node when it has none)."""
    from .context import Node

    props = node.props
    zero_usage = node.label is Label.LLM_CALL and all(not props.get(k) for k in USAGE_PROPS)
    if not written_by_normalizer and not zero_usage:
        return node  # no other producer known writes defaults
    out = {k: v for k, v in props.items() if v is not None and not (v == "" and k in _EMPTY_IS_ABSENT)}
    if zero_usage:
        # All three 0 (or absent): no usage was recorded. A real request always
        # counts its prompt; a cache-read 0 then says nothing either.
        for k in (*USAGE_PROPS, "cacheReadTokenCount"):
            out.pop(k, None)
    if written_by_normalizer and node.label in (Label.SESSION, Label.MAS_CALL) and "spanId" not in out:
        # Made up by the producer, not measured: its status and duration are defaults.
        out.pop("success", None)
        if node.label is Label.MAS_CALL:
            out.pop("duration", None)
    return Node(node.label, out)


def reconcile(session: "Node", nodes: Iterable["Node"], edges: Iterable["Edge"]) -> tuple[list["Edge"], Provenance]:
    """The call links of one session with those it lacks inferred, and what was
    inferred. `nodes`: the session's calls (not the Session, not non-call spans)."""
    from .context import Edge

    nodes = list(nodes)
    edges = list(edges)
    written_by_normalizer = writes_defaults(session)
    held = {n.id for n in nodes}
    held.add(session.id)
    has_parent = {e.target for e in edges if e.source in held}
    if not written_by_normalizer and all(n.id in has_parent for n in nodes if n.label in _PLACED_UNDER_AGENTS):
        return edges, NOTHING_INFERRED  # this project's ingestion links every call: nothing to infer
    invented = frozenset(
        n.id for n in nodes if written_by_normalizer and n.label is Label.MAS_CALL and n.get("spanId") is None
    )
    by_span = {n.get("spanId"): n for n in nodes if n.get("spanId") is not None}
    missing_parents: tuple[str, ...] = ()
    if written_by_normalizer:
        missing_parents = tuple(
            sorted(n.id for n in nodes if n.get("parentSpanId") is not None and n.get("parentSpanId") not in by_span)
        )
    orphans = [n for n in nodes if n.id not in has_parent and n.label in _PLACED_UNDER_AGENTS]
    if not orphans:
        return edges, Provenance(invented=invented, missing_parents=missing_parents)

    agents = [n for n in nodes if n.label is Label.AGENT_CALL]
    mas_calls = sorted((n for n in nodes if n.label is Label.MAS_CALL), key=lambda n: (n.start, n.id))
    inferred: dict[str, tuple[str, str]] = {}
    unplaced: dict[Label, list[str]] = {}
    for call in orphans:
        agent = _agent_by_ancestry(call, by_span)
        how = BY_ANCESTRY
        if agent is None:
            agent, how = _agent_by_time(call, agents), BY_TIME
        if agent is not None:
            inferred[call.id] = (agent.id, how)
            continue
        unplaced.setdefault(call.label, []).append(call.id)
        if mas_calls:
            inferred[call.id] = (mas_calls[0].id, "no agent call contains it")
    edges.extend(Edge(parent, child) for child, (parent, _) in inferred.items())
    return edges, Provenance(
        inferred=inferred,
        unplaced={label: tuple(sorted(ids)) for label, ids in unplaced.items()},
        invented=invented,
        missing_parents=missing_parents,
    )


def _agent_by_ancestry(call: "Node", by_span: Mapping[str, "Node"]) -> "Node | None":
    """The nearest agent call up the call's parent spans, as far as the graph holds them."""
    seen: set[str] = set()
    parent = call.get("parentSpanId")
    while parent is not None and parent not in seen and parent in by_span:
        seen.add(parent)
        node = by_span[parent]
        if node.label is Label.AGENT_CALL:
            return node
        parent = node.get("parentSpanId")
    return None


def _agent_by_time(call: "Node", agents: list["Node"]) -> "Node | None":
    """The innermost agent call whose time contains the call's; None when there is
    none, or when two that contain it overlap without one holding the other
    (agents running side by side: which one made the call is not known)."""
    holding = [a for a in agents if a.start - _SLACK_S <= call.start and call.end <= a.end + _SLACK_S]
    if not holding:
        return None
    holding.sort(key=lambda a: (a.end - a.start, a.id))
    inner = holding[0]
    for other in holding[1:]:
        if not (other.start - _SLACK_S <= inner.start and inner.end <= other.end + _SLACK_S):
            return None
    return inner
