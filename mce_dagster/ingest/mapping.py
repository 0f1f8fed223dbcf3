"""A session's parsed spans -> ontology nodes and links (design 01, section 1).

Pure: no I/O. The rules, in order:
- a `.workflow` / `.graph` span that is a root of the session is a MASCall; one
  nested inside another call is a step of it, a TaskCall;
- a call's parent is its nearest ancestor span that is a call; non-call spans are
  kept as `Span` children of their parent;
- a call (or span) whose parent cannot be placed hangs from the session's first
  MASCall; a session with no MASCall gets one that spans the whole session;
- a call that no AgentCall reaches is also linked from the agent it ran for, when
  that is unambiguous: the AgentCall named by its `agent_id` whose time contains
  it, or (without `agent_id`) the only agent call detached from the trace tree
  whose time contains it. SDKs such as ioa_observe record agents in traces of
  their own, so without this the agents would own none of their LLM and tool calls.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..core.context import Edge, Node, SessionContext
from ..core.models import NODE_MODELS
from ..core.ontology import CHILD_REL, Label, Rel
from .spans import LABEL_OF_KIND, ParsedSpan

# Children may start a little before the parent span the SDK opened around them.
_TIME_SLACK_NS = 1_000


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

    def node_count(self) -> int:
        return sum(len(v) for v in self.nodes.values())

    def to_context(self) -> SessionContext:
        """The session context straight from ingestion, with no graph in between."""
        nodes = [Node(label, {k: v for k, v in props.items() if v is not None}) for label, rows in self.nodes.items() for props in rows]
        edges = [Edge(l.source_id, l.target_id) for l in self.links if l.rel is not Rel.HAS_SPAN]
        return SessionContext.build(nodes, edges)


def synthetic_mas_id(session_id: str) -> str:
    return f"{session_id}#mas"


def build_session_graph(session_id: str, spans: list[ParsedSpan]) -> SessionGraph:
    if not spans:
        raise ValueError(f"session {session_id!r} has no spans")
    by_id: dict[str, ParsedSpan] = {}
    for span in spans:  # a span exported twice is one span; the last copy wins
        by_id[span.span_id] = span
    ordered = sorted(by_id.values(), key=lambda s: (s.start, s.span_id))
    graph = SessionGraph(session_id=session_id)
    graph.counts["duplicate_rows"] = len(spans) - len(by_id)

    def is_root(span: ParsedSpan) -> bool:
        return span.parent_span_id is None or span.parent_span_id not in by_id

    label: dict[str, Label] = {}
    for span in ordered:
        if span.kind == "mas":
            label[span.span_id] = Label.MAS_CALL if is_root(span) else Label.TASK_CALL
        elif span.kind is not None:
            label[span.span_id] = LABEL_OF_KIND[span.kind]
        else:
            label[span.span_id] = Label.SPAN

    start_ns = min(s.start_ns for s in ordered)
    end_ns = max(s.end_ns for s in ordered)
    extent = {
        "startTime": start_ns / 1e9,
        "endTime": end_ns / 1e9,
        "startTimeUnixNano": start_ns,
        "endTimeUnixNano": end_ns,
        "duration": (end_ns - start_ns) / 1e6,
    }
    services = Counter(s.service for s in ordered if s.service)
    roots = [s for s in ordered if is_root(s) and s.service]
    app_name = roots[0].service if roots else (services.most_common(1)[0][0] if services else None)

    def add(lbl: Label, props: dict[str, Any]) -> None:
        NODE_MODELS[lbl].model_validate(props)  # a node that does not fit fails loudly here
        graph.nodes.setdefault(lbl, []).append(props)

    add(
        Label.SESSION,
        {
            "id": session_id,
            "sessionId": session_id,
            "name": app_name or session_id,
            **extent,
            "appName": app_name,
        },
    )

    mas_calls = [s for s in ordered if label[s.span_id] is Label.MAS_CALL]
    if mas_calls:
        first_mas: tuple[Label, str] = (Label.MAS_CALL, mas_calls[0].span_id)
    else:
        mas_id = synthetic_mas_id(session_id)
        add(
            Label.MAS_CALL,
            {
                "id": mas_id,
                "sessionId": session_id,
                "name": app_name or "session",
                **extent,
            },
        )
        graph.counts["synthetic_mas_calls"] += 1
        first_mas = (Label.MAS_CALL, mas_id)
        graph.links.append(GraphLink(Label.SESSION, session_id, Rel.HAS_MAS_CALL, Label.MAS_CALL, mas_id))

    # The ontology parent of each span: nearest call ancestor for calls, the span
    # parent itself for non-call spans.
    parent_of: dict[str, tuple[Label, str]] = {}
    for span in ordered:
        lbl = label[span.span_id]
        if lbl is Label.MAS_CALL:
            graph.links.append(GraphLink(Label.SESSION, session_id, Rel.HAS_MAS_CALL, lbl, span.span_id))
            continue
        parent_id = span.parent_span_id
        if lbl is not Label.SPAN:
            seen: set[str] = set()
            while parent_id in by_id and label[parent_id] is Label.SPAN and parent_id not in seen:
                seen.add(parent_id)
                parent_id = by_id[parent_id].parent_span_id
        if parent_id in by_id and parent_id != span.span_id:
            parent_of[span.span_id] = (label[parent_id], parent_id)
        else:
            parent_of[span.span_id] = first_mas
            graph.counts["placed_under_first_mas_call"] += 1
        parent_label, pid = parent_of[span.span_id]
        graph.links.append(GraphLink(parent_label, pid, CHILD_REL[lbl], lbl, span.span_id))

    _attribute_to_agents(ordered, label, parent_of, by_id, graph)

    for span in ordered:
        lbl = label[span.span_id]
        props: dict[str, Any] = {
            "id": span.span_id,
            "sessionId": session_id,
            "name": span.name,
            "spanId": span.span_id,
            "parentSpanId": span.parent_span_id,
            "startTime": span.start,
            "endTime": span.end,
            "startTimeUnixNano": span.start_ns,
            "endTimeUnixNano": span.end_ns,
            "duration": span.duration_ms,
            "success": span.success,
        }
        if lbl is Label.TASK_CALL:
            props["taskName"] = span.props.get("taskName") or span.name
        elif lbl is Label.SPAN:
            props["spanName"] = span.name
        elif lbl is not Label.MAS_CALL:
            props.update(span.props)
        add(lbl, props)
        graph.counts[lbl.value] += 1
        _structural(span, lbl, graph)
    return graph


def _attribute_to_agents(
    ordered: list[ParsedSpan],
    label: dict[str, Label],
    parent_of: dict[str, tuple[Label, str]],
    by_id: dict[str, ParsedSpan],
    graph: SessionGraph,
) -> None:
    agents = [s for s in ordered if label[s.span_id] is Label.AGENT_CALL]
    if not agents:
        return
    # Agents detached from the trace tree: no span parent inside the session.
    detached = {
        s.span_id for s in agents if s.parent_span_id is None or s.parent_span_id not in by_id
    }
    covered: dict[str, bool] = {}

    def is_covered(span_id: str) -> bool:
        """Some AgentCall already reaches this call (through its parents)."""
        chain = []
        node = span_id
        result = False
        while True:
            if node in covered:
                result = covered[node]
                break
            chain.append(node)
            parent = parent_of.get(node)
            if parent is None:
                break
            parent_label, parent_id = parent
            if parent_label is Label.AGENT_CALL:
                result = True
                break
            if parent_id not in by_id:
                break
            node = parent_id
        for n in chain:
            covered[n] = result
        return result

    for span in ordered:
        lbl = label[span.span_id]
        if lbl in (Label.SPAN, Label.MAS_CALL, Label.AGENT_CALL) or is_covered(span.span_id):
            continue
        containing = [
            a
            for a in agents
            if a.start_ns - _TIME_SLACK_NS <= span.start_ns <= a.end_ns + _TIME_SLACK_NS and a.span_id != span.span_id
        ]
        if span.agent_hint:
            named = [a for a in containing if a.props.get("agentName") == span.agent_hint]
            chosen = max(named, key=lambda a: (a.start, a.span_id)) if named else None
        else:
            loose = [a for a in containing if a.span_id in detached]
            chosen = loose[0] if len(loose) == 1 else None
            if len(loose) > 1:
                graph.counts["ambiguous_agent_attribution"] += 1
        if chosen is None:
            continue
        graph.links.append(GraphLink(Label.AGENT_CALL, chosen.span_id, CHILD_REL[lbl], lbl, span.span_id))
        graph.counts["attributed_to_agent"] += 1
        covered[span.span_id] = True


def _structural(span: ParsedSpan, lbl: Label, graph: SessionGraph) -> None:
    if lbl is Label.AGENT_CALL:
        name = span.props["agentName"]
        graph.agents.add(name)
        graph.executes.append((lbl, span.span_id, Label.AGENT, name))
    elif lbl is Label.TOOL_CALL:
        name = span.props["toolName"]
        graph.tools.setdefault(name, {})
        graph.executes.append((lbl, span.span_id, Label.TOOL, name))
    elif lbl is Label.LLM_CALL:
        model = span.props.get("modelName")
        if model:
            graph.llms[model] = span.llm_provider
            graph.executes.append((lbl, span.span_id, Label.LLM, model))
        for tool in span.tools_offered:
            entry = graph.tools.setdefault(tool["name"], {})
            if tool.get("description"):
                entry["description"] = tool["description"]
            if tool.get("parameters"):
                params = tool["parameters"]
                entry["parameters"] = params if isinstance(params, str) else json.dumps(params)
    if lbl is Label.SPAN:
        return
    if span.input_text:
        graph.states.append((lbl, span.span_id, Rel.HAS_INITIAL_STATE, f"{span.span_id}/input", span.input_text))
    if span.output_text:
        graph.states.append((lbl, span.span_id, Rel.HAS_FINAL_STATE, f"{span.span_id}/output", span.output_text))
