"""Population metrics: one value over all sessions of an app.

`GraphDeterminismScore` compares the directed graphs of consecutive agent and tool
names of every pair of sessions. Evaluated pair by pair it costs n² at n sessions;
here it is kept as counts, so a new session costs its own edges:

    sum over unordered pairs {i, j} of |E_i Δ E_j| = Σ_e c_e · (n − c_e)

where c_e is the number of sessions whose edge set holds edge e (a pair differs on
e exactly when one of the two holds it). Integers throughout, so folding sessions in
one by one gives exactly the value of a full recomputation.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ..context import SessionContext
from ..metric import MetricFailure, MetricValue, NotApplicable, Outcome, native_metric
from .interactions import actor_sequence

ActorEdge = tuple[str, str]


def consecutive_edges(sequence: Sequence[str]) -> frozenset[ActorEdge]:
    """The directed edges name → next name of a sequence; a repeated name is a loop."""
    return frozenset(zip(sequence, sequence[1:]))


def session_edges(session: SessionContext) -> frozenset[ActorEdge]:
    """A session's graph: edges between consecutive agent and tool names by start
    time, the sequence CyclesCount reads."""
    return consecutive_edges(actor_sequence(session.beneath(session.session)))


def pair_count(n: int) -> int:
    return n * (n - 1) // 2


@dataclass
class EdgeSetPopulation:
    """The sessions of one app counted so far: each session's edge set (with the
    digest of what it was computed from, to tell a changed session), and for each
    edge the number of sessions holding it."""

    members: dict[str, tuple[str, frozenset[ActorEdge]]] = field(default_factory=dict)
    counts: Counter[ActorEdge] = field(default_factory=Counter)

    @property
    def size(self) -> int:
        return len(self.members)

    def digest_of(self, session_id: str) -> str | None:
        member = self.members.get(session_id)
        return member[0] if member else None

    def remove(self, session_id: str) -> bool:
        """Take a session out; False when it was not counted."""
        member = self.members.pop(session_id, None)
        if member is None:
            return False
        for edge in member[1]:
            self.counts[edge] -= 1
            if not self.counts[edge]:
                del self.counts[edge]
        return True

    def add(self, session_id: str, digest: str, edges: Iterable[ActorEdge]) -> None:
        """Count a session, replacing what was counted of it before."""
        self.remove(session_id)
        edge_set = frozenset(edges)
        self.members[session_id] = (digest, edge_set)
        self.counts.update(edge_set)

    def pair_difference_sum(self) -> int:
        """Σ over unordered pairs of sessions of the size of their edge sets'
        symmetric difference."""
        n = self.size
        return sum(c * (n - c) for c in self.counts.values())

    def outcome(self) -> Outcome:
        n = self.size
        if n < 2:
            return NotApplicable(f"{n} session{'' if n == 1 else 's'}: the mean over pairs needs two sessions or more")
        total, pairs = self.pair_difference_sum(), pair_count(n)
        return MetricValue(
            value=total / pairs,
            numerator=float(total),
            denominator=float(pairs),
            metadata={"sessions": n, "distinct_edges": len(self.counts)},
        )

    def to_json(self) -> str:
        """Edges listed once, members as indices into that list, so the text grows
        by a few numbers per session."""
        edges = sorted(self.counts)
        index = {edge: i for i, edge in enumerate(edges)}
        return json.dumps(
            {
                "edges": [list(e) for e in edges],
                "counts": [self.counts[e] for e in edges],
                "members": {sid: [digest, sorted(index[e] for e in es)] for sid, (digest, es) in sorted(self.members.items())},
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> "EdgeSetPopulation":
        data = json.loads(text)
        edges = [tuple(e) for e in data["edges"]]
        members = {sid: (digest, frozenset(edges[i] for i in idx)) for sid, (digest, idx) in data["members"].items()}
        return cls(members=members, counts=Counter(dict(zip(edges, data["counts"]))))


@dataclass(frozen=True)
class PopulationChanges:
    """What differs between the counted sessions and the current ones: sessions to
    (re)count, with their current digest, and sessions to take out."""

    to_count: dict[str, str]
    to_remove: tuple[str, ...]


def changes_since(population: EdgeSetPopulation, current: Mapping[str, str]) -> PopulationChanges:
    """`current` maps each session of the app now to the digest of its rows."""
    to_count = {sid: d for sid, d in current.items() if population.digest_of(sid) != d}
    to_remove = tuple(sorted(sid for sid in population.members if sid not in current))
    return PopulationChanges(to_count=to_count, to_remove=to_remove)


def population_entity_id(app: str) -> str:
    """The id a Population result is stored under: there is no App node to measure."""
    return f"app:{app}"


@native_metric("GraphDeterminismScore")
def graph_determinism_score(entity, inp) -> Outcome:
    raise MetricFailure("GraphDeterminismScore is a Population metric: it is computed over all sessions of an app, not per entity")
