"""A session's parsed spans -> ontology nodes and links (docs/graph.md, execution nodes).

Pure: no I/O. The rules, in order:
- a `.workflow` / `.graph` span that is a root of the session is a MASCall; one
  nested inside another call is a step of it, a TaskCall;
- a call's parent is its nearest ancestor span that is a call; non-call spans are
  kept as `Span` children of their parent;
- a call (or span) whose parent cannot be placed hangs from the session's first
  MASCall; a session with no MASCall gets one that spans the whole session;
- ParentSpanIds that loop (A's parent is B, B's is A) are broken: every span on
  the loop hangs from the first MASCall, with a note saying so, and no walk up the
  parents ever sees the loop;
- a call that no AgentCall reaches is also linked from the agent it ran for, when
  that is unambiguous: the AgentCall named by its `agent_id` whose time contains
  it, or (without `agent_id`) the only agent call detached from the trace tree
  whose time contains it. SDKs such as ioa_observe record agents in traces of
  their own, so without this the agents would own none of their LLM and tool calls.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from ..core.models import NODE_MODELS
from ..core.ontology import CHILD_REL, Label, Rel
from ..core.session_graph import GraphLink, SessionGraph
from .spans import LABEL_OF_KIND, ParsedSpan

# Children may start a little before the parent span the SDK opened around them.
_TIME_SLACK_NS = 1_000


def synthetic_mas_id(session_id: str, attempt: int = 0) -> str:
    """The id of the MASCall made for a session that has none; `attempt` > 0 when
    an earlier candidate is taken by a span."""
    return f"{session_id}#mas" if attempt == 0 else f"{session_id}#mas{attempt + 1}"


def _span_parents(by_id: dict[str, ParsedSpan]) -> dict[str, str | None]:
    """Each span's parent inside the session; None for roots (no parent, or one
    the session does not hold). A span that is its own parent is a loop of one."""
    parent: dict[str, str | None] = {}
    for span_id, span in by_id.items():
        p = span.parent_span_id
        parent[span_id] = p if p in by_id else None
    return parent


def _cycles(parent: dict[str, str | None]) -> list[list[str]]:
    """The loops of the parent map (each span has at most one parent, so each
    span is on at most one loop), found in one pass: O(spans)."""
    state: dict[str, int] = {}  # 1: on the current walk, 2: done
    loops: list[list[str]] = []
    for start in parent:
        if start in state:
            continue
        walk: list[str] = []
        node: str | None = start
        while node is not None and node not in state:
            state[node] = 1
            walk.append(node)
            node = parent[node]
        if node is not None and state[node] == 1:
            loops.append(walk[walk.index(node) :])
        for n in walk:
            state[n] = 2
    return loops


def build_session_graph(session_id: str, spans: list[ParsedSpan], mas_id: str | None = None) -> SessionGraph:
    """`mas_id`: the id for a MASCall made for the session, when it needs one
    (default `synthetic_mas_id(session_id)`); it must not be a span id of the session."""
    if not spans:
        raise ValueError(f"session {session_id!r} has no spans")
    by_id: dict[str, ParsedSpan] = {}
    for span in spans:  # a span exported twice is one span; the last copy wins
        by_id[span.span_id] = span
    ordered = sorted(by_id.values(), key=lambda s: (s.start, s.span_id))
    graph = SessionGraph(session_id=session_id)
    graph.counts["duplicate_rows"] = len(spans) - len(by_id)

    span_parent = _span_parents(by_id)
    on_loop: set[str] = set()
    for loop in _cycles(span_parent):
        shown = loop if len(loop) <= 6 else [*loop[:3], f"... {len(loop) - 4} more ...", loop[-1]]
        path = " -> ".join([*shown, loop[0]])
        for span_id in loop:
            on_loop.add(span_id)
            span_parent[span_id] = None
            graph.notes.append((span_id, f"ParentSpanIds loop ({path}); placed under the session's first MASCall"))
        graph.counts["parent_cycles"] += 1

    def is_root(span: ParsedSpan) -> bool:
        return span_parent[span.span_id] is None and span.span_id not in on_loop

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
        mas_id = mas_id or synthetic_mas_id(session_id)
        if mas_id in by_id or mas_id == session_id:
            raise ValueError(f"the MASCall id {mas_id!r} made for session {session_id!r} is a span id of it")
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

    # The nearest call at or above each span (through non-call spans), memoised:
    # the parent map has no loops left, so every walk ends.
    nearest_call: dict[str, str | None] = {}

    def call_at_or_above(span_id: str | None) -> str | None:
        walk = []
        while span_id is not None and span_id not in nearest_call and label[span_id] is Label.SPAN:
            walk.append(span_id)
            span_id = span_parent[span_id]
        found = None if span_id is None else nearest_call.get(span_id, span_id)
        for n in walk:
            nearest_call[n] = found
        return found

    # The ontology parent of each span: nearest call ancestor for calls, the span
    # parent itself for non-call spans.
    parent_of: dict[str, tuple[Label, str]] = {}
    for span in ordered:
        lbl = label[span.span_id]
        if lbl is Label.MAS_CALL:
            graph.links.append(GraphLink(Label.SESSION, session_id, Rel.HAS_MAS_CALL, lbl, span.span_id))
            continue
        parent_id = span_parent[span.span_id]
        if lbl is not Label.SPAN:
            parent_id = call_at_or_above(parent_id)
        if parent_id is not None:
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
        seen: set[str] = set()
        while node not in seen:  # parent_of has no loops; the guard keeps it so
            seen.add(node)
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
