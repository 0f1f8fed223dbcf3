"""The knowledge graph: every read and write the project makes, over one backend."""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..core.context import Edge, Node, SessionContext
from ..core.models import MetricNode, MetricResultNode
from ..core.ontology import Label, Scope
from ..ingest.mapping import SessionGraph
from . import cypher

log = logging.getLogger(__name__)


class GraphBackend(Protocol):
    name: str

    def query(self, statement: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]: ...

    def write(self, statements: Sequence[tuple[str, Mapping[str, Any]]]) -> list[list[dict[str, Any]]]:
        """Run the statements in order; in one transaction where the backend has them."""
        ...

    def ensure_indexes(self, statements: Sequence[str]) -> None: ...

    def close(self) -> None: ...


class FalkorDBBackend:
    """FalkorDB over a socket: the embedded server (see `embedded`) or a remote one."""

    name = "falkordb"

    def __init__(self, *, unix_socket_path: str | None = None, host: str = "127.0.0.1", port: int = 6379, graph: str = "mce"):
        from falkordb import FalkorDB

        if unix_socket_path:
            self._db = FalkorDB(unix_socket_path=unix_socket_path)
        else:
            self._db = FalkorDB(host=host, port=port)
        self._graph = self._db.select_graph(graph)

    def query(self, statement: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        result = self._graph.query(statement, dict(params or {}))
        columns = [h[1] if isinstance(h, (list, tuple)) else h for h in (result.header or [])]
        return [dict(zip(columns, row)) for row in result.result_set]

    def write(self, statements: Sequence[tuple[str, Mapping[str, Any]]]) -> list[list[dict[str, Any]]]:
        # FalkorDB has no multi-statement transactions: each statement is atomic on
        # its own, so callers put what must be all-or-nothing into one statement.
        return [self.query(s, p) for s, p in statements]

    def ensure_indexes(self, statements: Sequence[str]) -> None:
        for statement in statements:
            try:
                self._graph.query(statement)
            except Exception as exc:  # FalkorDB says so when the index exists
                if "already indexed" not in str(exc).lower():
                    raise

    def close(self) -> None:
        try:
            self._db.connection.close()
        except Exception:  # closing a dead connection is not an error worth raising
            pass


def embedded_backend(home: Path, graph: str = "mce") -> FalkorDBBackend:
    from .embedded import EmbeddedFalkorDB

    socket = EmbeddedFalkorDB(home).ensure_running()
    return FalkorDBBackend(unix_socket_path=str(socket), graph=graph)


def _chunks(rows: list[Any], size: int) -> Iterable[list[Any]]:
    for i in range(0, len(rows), size):
        yield rows[i : i + size]


class KnowledgeGraph:
    """Reads sessions, writes ingested sessions and metric results."""

    def __init__(self, backend: GraphBackend):
        self.backend = backend
        self.backend.ensure_indexes(cypher.index_statements())

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> "KnowledgeGraph":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- ingestion ---------------------------------------------------------

    def write_sessions(self, sessions: Sequence[SessionGraph]) -> None:
        """One batch of ingested sessions. The Session nodes are written last, so a
        session becomes visible to sensors and listings only once its calls are in."""
        nodes: dict[Label, list[dict[str, Any]]] = defaultdict(list)
        links: dict[tuple[Label, Any, Label], list[dict[str, str]]] = defaultdict(list)
        agents: set[str] = set()
        tools: dict[str, dict[str, Any]] = {}
        llms: dict[str, str | None] = {}
        executes: dict[tuple[Label, Label], list[dict[str, str]]] = defaultdict(list)
        states: dict[tuple[Label, Any], list[dict[str, str]]] = defaultdict(list)
        for graph in sessions:
            for label, rows in graph.nodes.items():
                nodes[label].extend(rows)
            for link in graph.links:
                links[(link.source_label, link.rel, link.target_label)].append({"s": link.source_id, "t": link.target_id})
            agents |= graph.agents
            for name, props in graph.tools.items():
                tools.setdefault(name, {}).update(props)
            llms.update(graph.llms)
            for call_label, call_id, structural, name in graph.executes:
                executes[(call_label, structural)].append({"id": call_id, "name": name})
            for call_label, call_id, rel, state_id, content in graph.states:
                states[(call_label, rel)].append({"id": call_id, "sid": state_id, "content": content})

        now = time.time()
        statements: list[tuple[str, Mapping[str, Any]]] = []
        for label, rows in nodes.items():
            if label is Label.SESSION:
                continue
            for chunk in _chunks(rows, 2000):
                statements.append((cypher.merge_nodes(label), {"rows": chunk}))
        if agents:
            statements.append((cypher.MERGE_AGENTS, {"rows": [{"name": n} for n in sorted(agents)]}))
        if tools:
            statements.append((
                cypher.MERGE_TOOLS,
                {"rows": [{"name": n, "description": p.get("description"), "parameters": p.get("parameters")} for n, p in sorted(tools.items())]},
            ))
        if llms:
            statements.append((cypher.MERGE_LLMS, {"rows": [{"name": n, "provider": p} for n, p in sorted(llms.items())]}))
        for (call_label, structural), rows in executes.items():
            for chunk in _chunks(rows, 2000):
                statements.append((cypher.merge_executes(call_label, structural), {"rows": chunk}))
        for (call_label, rel), rows in states.items():
            for chunk in _chunks(rows, 500):
                statements.append((cypher.merge_states(call_label, rel), {"rows": chunk}))
        session_rows = nodes.get(Label.SESSION, [])
        statements.append((cypher.merge_nodes(Label.SESSION), {"rows": session_rows, "now": now}))
        for (source, rel, target), rows in links.items():
            for chunk in _chunks(rows, 2000):
                statements.append((cypher.merge_links(source, rel, target), {"rows": chunk}))
        self.backend.write(statements)

    # -- reading sessions --------------------------------------------------

    def session_ids(self) -> list[str]:
        return [r["id"] for r in self.backend.query(cypher.LIST_SESSIONS)]

    def existing_sessions(self, session_ids: Sequence[str]) -> set[str]:
        return {r["id"] for r in self.backend.query(cypher.EXISTING_SESSIONS, {"ids": list(session_ids)})}

    def count_sessions(self) -> int:
        return int(self.backend.query(cypher.COUNT_SESSIONS)[0]["n"])

    def read_contexts(self, session_ids: Sequence[str]) -> dict[str, SessionContext]:
        """The subgraphs of many sessions in one round trip. Missing sessions are
        absent from the result."""
        if not session_ids:
            return {}
        rows = self.backend.query(cypher.read_contexts(), {"ids": list(session_ids)})
        nodes: dict[str, list[Node]] = defaultdict(list)
        edges: dict[str, list[Edge]] = defaultdict(list)
        for row in rows:
            props = {k: v for k, v in row["props"].items() if v is not None}
            label = Label(row["label"])
            session_id = props.get("sessionId") or props["id"]
            nodes[session_id].append(Node(label, props))
            for parent in row["parents"] or ():
                if parent is not None:
                    edges[session_id].append(Edge(parent, props["id"]))
        contexts = {}
        for session_id, session_nodes in nodes.items():
            if any(n.label is Label.SESSION for n in session_nodes):
                contexts[session_id] = SessionContext.build(session_nodes, edges[session_id])
        return contexts

    # -- results -----------------------------------------------------------

    def write_metrics(self, metrics: Sequence[MetricNode]) -> None:
        rows = [m.model_dump() for m in metrics]
        if rows:
            self.backend.write([(cypher.MERGE_METRICS, {"rows": rows})])

    def write_results(self, metric: MetricNode, scope: Scope, results: Sequence[MetricResultNode]) -> list[str]:
        """Write one metric's results at one scope as one statement: the whole batch
        or none of it. Returns the ids of entities that were not found (not written)."""
        rows = [r.as_row() for r in results]
        statements: list[tuple[str, Mapping[str, Any]]] = [(cypher.MERGE_METRICS, {"rows": [metric.model_dump()]})]
        if rows:
            statements.append((cypher.write_results(Label(scope.value)), {"rows": rows}))
        out = self.backend.write(statements)
        written = {r["id"] for r in out[-1]} if rows else set()
        return [r["entityId"] for r in rows if r["id"] not in written]

    def read_results(
        self,
        session_ids: Sequence[str],
        *,
        name: str | None = None,
        provider: str = "native",
        scope: Scope | None = None,
        version: int | None = None,
    ) -> list[dict[str, Any]]:
        if name is not None:
            rows = self.backend.query(
                cypher.READ_RESULTS_FOR,
                {"ids": list(session_ids), "name": name, "provider": provider, "scope": scope.value if scope else None, "version": version},
            )
        else:
            rows = self.backend.query(cypher.READ_RESULTS, {"ids": list(session_ids)})
        out = []
        for row in rows:
            props = dict(row["props"])
            if isinstance(props.get("metadata"), str):
                try:
                    props["metadata"] = json.loads(props["metadata"])
                except json.JSONDecodeError:
                    pass
            out.append(props)
        return out

    def count_results(self) -> int:
        return int(self.backend.query(cypher.COUNT_RESULTS)[0]["n"])

    def property_keys(self, label: Label) -> set[str]:
        """Property names seen on (a sample of) nodes of one label."""
        return {r["k"] for r in self.backend.query(cypher.LABEL_PROPERTY_KEYS, {"label": label.value})}
