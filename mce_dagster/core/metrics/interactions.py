"""How agents and tools follow one another: cycles, hand-offs, tool use."""

from __future__ import annotations

from collections import Counter

from ..context import Node
from ..metric import (
    DependencyKey,
    EvaluationInput,
    MetricFailure,
    MetricValue,
    NotApplicable,
    Outcome,
    native_metric,
)
from ..ontology import Label, Scope


def count_contiguous_cycles(sequence: list[str], min_block: int = 2) -> int:
    """Scan from i = 0: for k = min_block .. (n - i) / 2, if the block of length k at
    i equals the block right after it, count one cycle and move on by k, so the
    repeat can match again; if no k matches, move on by one. Each return of a
    block counts: A,T,A,T -> 1; A,B,C,A,B,C,A,B,C -> 2; A,B,A,B,A,B -> 2."""
    n = len(sequence)
    cycles = 0
    i = 0
    while i < n:
        for k in range(min_block, (n - i) // 2 + 1):
            if sequence[i : i + k] == sequence[i + k : i + 2 * k]:
                cycles += 1
                i += k
                break
        else:
            i += 1
    return cycles


def actor_sequence(calls: tuple[Node, ...] | list[Node]) -> list[str]:
    """Names of the agent and tool calls, in start order."""
    return [c.actor_name for c in calls if c.label in (Label.AGENT_CALL, Label.TOOL_CALL)]


@native_metric("CyclesCount")
def cycles_count(entity: Node, inp: EvaluationInput) -> Outcome:
    if unknown := inp.session.unknown_beneath(entity, Label.TOOL_CALL):
        return NotApplicable(unknown)
    sequence = actor_sequence(inp.session.beneath(entity))
    return MetricValue(
        value=float(count_contiguous_cycles(sequence)),
        reasoning=inp.session.inferred_note(entity, Label.TOOL_CALL),
        metadata={"sequence_length": len(sequence)},
    )


def agent_transitions(calls: list[Node]) -> list[tuple[str, str]]:
    """Consecutive agent names by start time, repeats collapsed, as (from, to) pairs."""
    names: list[str] = []
    for call in calls:
        name = call.actor_name
        if not names or names[-1] != name:
            names.append(name)
    return list(zip(names, names[1:]))


def _transition_key(pair: tuple[str, str]) -> str:
    return f"{pair[0]} -> {pair[1]}"


@native_metric("AgentToAgentInteractions")
def agent_to_agent(entity: Node, inp: EvaluationInput) -> Outcome:
    transitions = agent_transitions(inp.session.calls(Label.AGENT_CALL))
    counts = Counter(_transition_key(t) for t in transitions)
    return MetricValue(value=float(len(transitions)), metadata={"transitions": dict(sorted(counts.items()))})


@native_metric("AgentToToolInteractions")
def agent_to_tool(entity: Node, inp: EvaluationInput) -> Outcome:
    unplaced = inp.session.provenance.unplaced.get(Label.TOOL_CALL, ())
    if unplaced:
        return NotApplicable(
            f"{len(unplaced)} tool call(s) could be placed under no agent call (first: {unplaced[0]}): "
            "which agent made them is not known"
        )
    counts: Counter[str] = Counter()
    for tool in inp.session.calls(Label.TOOL_CALL):
        agent = inp.session.nearest_agent(tool)
        if agent is not None:
            counts[f"{agent.actor_name} -> {tool.actor_name}"] += 1
    return MetricValue(value=float(sum(counts.values())), metadata={"interactions": dict(sorted(counts.items()))})


A2A = DependencyKey(Scope.SESSION, "AgentToAgentInteractions")


@native_metric("WorkflowEfficiency")
def workflow_efficiency(entity: Node, inp: EvaluationInput) -> Outcome:
    """Distinct transitions over all transitions, read from AgentToAgentInteractions."""
    results = inp.dependencies.get(A2A)
    if results is None or entity.id not in results:
        raise MetricFailure("no AgentToAgentInteractions result for this session")
    a2a = results[entity.id]
    total = int(a2a.value)
    if total == 0:
        return NotApplicable("no agent-to-agent transition")
    distinct = len(a2a.metadata.get("transitions", {}))
    return MetricValue(value=distinct / total, numerator=float(distinct), denominator=float(total))
