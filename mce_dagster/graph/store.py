"""The knowledge graph: every read and write the project makes, over one backend."""

from __future__ import annotations

import functools
import json
import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..core.context import Edge, Node, SessionContext
from ..core.models import MetricNode, MetricResultNode
from ..core.ontology import NAMED_BY, ROWS_NOT_PLACED, Label, Scope
from ..core.session_graph import SessionGraph
from ..core.storable import escaped

if TYPE_CHECKING:
    from ..core.text import CallText
    from ..errors import UnknownSessionError
from . import cypher

log = logging.getLogger(__name__)


class DuplicateIdError(Exception):
    """A write would store a second node with an id the graph holds unique."""


class GraphBackend(Protocol):
    name: str
    #: Whether a statement creating a node with a taken unique id fails (with
    #: DuplicateIdError) rather than storing a duplicate.
    enforces_unique_ids: bool

    def query(self, statement: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]: ...

    def write(self, statements: Sequence[tuple[str, Mapping[str, Any]]]) -> list[list[dict[str, Any]]]:
        """Run the statements in order; in one transaction where the backend has them."""
        ...

    def ensure_indexes(self, statements: Sequence[str]) -> None: ...

    def close(self) -> None: ...


class FalkorDBBackend:
    """FalkorDB over a socket: the embedded server (see `embedded`) or a remote one."""

    name = "falkordb"
    # Its schema here is plain indexes: results are always merged.
    enforces_unique_ids = False

    def __init__(self, *, unix_socket_path: str | None = None, host: str = "127.0.0.1", port: int = 6379, graph: str = "mce"):
        from falkordb import FalkorDB

        if unix_socket_path:
            self._db = FalkorDB(unix_socket_path=unix_socket_path)
        else:
            self._db = FalkorDB(host=host, port=port)
        self._graph = self._db.select_graph(graph)

    @functools.cached_property
    def has_intern(self) -> bool:
        """Whether the server has `intern()` (recent FalkorDB; older ones answer
        "Unknown function"). Asked through `query`, so a server busy forking is
        waited for here as for any other statement."""
        from redis.exceptions import ResponseError

        try:
            self.query("RETURN intern('') AS s")
        except ResponseError as exc:
            if "unknown function" in str(exc).lower():
                return False
            raise
        return True

    # How long a statement the server answers `BUSY` is tried again: FalkorDB
    # answers so, without running it, while it prepares a fork (an append-only
    # file rewrite), which takes seconds on a large graph.
    BUSY_WAIT_S = 120.0

    def query(self, statement: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        from redis.exceptions import ResponseError

        deadline = time.monotonic() + self.BUSY_WAIT_S
        while True:
            try:
                result = self._graph.query(statement, escaped(dict(params or {})))
                break
            except ResponseError as exc:
                if not str(exc).startswith("BUSY") or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
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


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def _result_props(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A MetricResult's properties, its metadata decoded when it is JSON text."""
    props = dict(stored)
    if isinstance(props.get("metadata"), str):
        try:
            props["metadata"] = json.loads(props["metadata"])
        except json.JSONDecodeError:
            pass
    return props


def _session_statement(sessions: Sequence[SessionGraph], grown: Iterable[str] = ()) -> tuple[str, dict[str, Any]]:
    """The one statement that writes these sessions (see cypher.write_sessions);
    `grown`: those of them the graph held, rewritten with more rows."""
    nodes: dict[Label, list[dict[str, Any]]] = defaultdict(list)
    session_rows: list[dict[str, Any]] = []
    links: dict[tuple[Label, Any, Label], list[dict[str, str]]] = defaultdict(list)
    agents: set[str] = set()
    tools: dict[str, dict[str, Any]] = {}
    llms: dict[str, str | None] = {}
    executes: dict[tuple[Label, Label], list[dict[str, str]]] = defaultdict(list)
    states: dict[tuple[Label, Any], list[dict[str, str]]] = defaultdict(list)
    for graph in sessions:
        sid = graph.session_id
        for label, rows in graph.nodes.items():
            for props in rows:
                row = dict(props)
                if label is Label.SESSION:
                    row[cypher.INGEST_DIGEST] = graph.digest
                    # Null when every row was placed, so that a rewrite removes an older count.
                    row[ROWS_NOT_PLACED] = graph.rows_not_placed or None
                    row[cypher.INGEST_REFUSED] = sorted(graph.refused) or None
                    session_rows.append(row)
                else:
                    row[cypher.INGEST_DIGEST] = graph.digests.get(props["id"])
                    row[cypher.INGEST_SPAN] = graph.records.get(props["id"])
                    nodes[label].append(row)
        for link in graph.links:
            links[(link.source_label, link.rel, link.target_label)].append({"s": link.source_id, "t": link.target_id, "sid": sid})
        agents |= graph.agents
        for name, props in graph.tools.items():
            tools.setdefault(name, {}).update(props)
        llms.update(graph.llms)
        for call_label, call_id, structural, name in graph.executes:
            executes[(call_label, structural)].append({"id": call_id, "name": name, "sid": sid})
        for call_label, call_id, rel, state_id, content in graph.states:
            states[(call_label, rel)].append({"id": call_id, "stateId": state_id, "content": content, "sid": sid})

    params: dict[str, Any] = {
        "clear": [g.session_id for g in sessions],
        "grown": sorted(set(grown) & {g.session_id for g in sessions}),
        # Milliseconds: FalkorDB answers doubles rounded to 15 digits, and the poll
        # sensor's keyset cursor compares ingestedAt for equality with what it read.
        "now": round(time.time(), 3),
        "sessions": session_rows,
        "agents": [{"name": n} for n in sorted(agents)],
        "tools": [{"name": n, "description": p.get("description"), "parameters": p.get("parameters")} for n, p in sorted(tools.items())],
        "llms": [{"name": n, "provider": p} for n, p in sorted(llms.items())],
    }
    for label, rows in nodes.items():
        params[cypher.nodes_param(label)] = rows
    for key, rows in executes.items():
        params[cypher.executes_param(*key)] = rows
    for key, rows in states.items():
        params[cypher.states_param(*key)] = rows
    for key, rows in links.items():
        params[cypher.links_param(*key)] = rows
    statement = cypher.write_sessions(sorted(nodes), sorted(executes), sorted(states), sorted(links))
    return statement, params


def describe_orphans(orphans: Mapping[str, Mapping[str, int]]) -> str:
    """One line naming the sessions whose calls have no Session node (see
    KnowledgeGraph.calls_without_session)."""
    calls = sum(sum(by_label.values()) for by_label in orphans.values())
    shown = ", ".join(sorted(orphans)[:10]) + (" ..." if len(orphans) > 10 else "")
    return f"{calls} call(s) name {len(orphans)} session(s) the graph holds no Session node for, not evaluated: {shown}"


class KnowledgeGraph:
    """Reads sessions, writes ingested sessions and metric results."""

    def __init__(self, backend: GraphBackend):
        self.backend = backend
        self.backend.ensure_indexes(cypher.index_statements(backend.name))
        self._ingested_at_indexed = False

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> "KnowledgeGraph":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- ingestion ---------------------------------------------------------

    def write_sessions(self, sessions: Sequence[SessionGraph], grown: Iterable[str] = ()) -> dict[str, str]:
        """Write ingested sessions, each all or nothing: the batch goes as one
        statement, and if that fails, each session alone, so one bad session never
        costs the others. `grown`: sessions of the batch the graph holds, which
        are rewritten whole with their results kept (see cypher.write_sessions).
        Returns the sessions that could not be written, with the reason; a new
        one leaves nothing in the graph, a grown one stays as it was."""
        if not sessions:
            return {}
        grown = set(grown)
        try:
            self.backend.write([_session_statement(sessions, grown)])
            return {}
        except Exception as exc:  # any failure of the batch: retried session by session
            if len(sessions) == 1:
                log.warning("session %s not written: %s", sessions[0].session_id, exc)
                return {sessions[0].session_id: _reason(exc)}
            log.warning("a batch of %d sessions failed (%s); writing them one by one", len(sessions), _reason(exc))
        failed = {}
        for graph in sessions:
            try:
                self.backend.write([_session_statement([graph], grown)])
            except Exception as exc:
                log.warning("session %s not written: %s", graph.session_id, exc)
                failed[graph.session_id] = _reason(exc)
        return failed

    def delete_sessions(self, session_ids: Sequence[str]) -> None:
        """Sessions with everything ingested of them and their metric results."""
        for chunk in _chunks(list(session_ids), 200):
            self.backend.write([(cypher.DELETE_SESSIONS, {"ids": chunk})])

    def span_owners(self, ids: Sequence[str]) -> dict[str, set[str]]:
        """Execution node id -> the sessions holding a node with that id."""
        owners: dict[str, set[str]] = defaultdict(set)
        for chunk in _chunks(list(dict.fromkeys(ids)), 5000):
            for row in self.backend.query(cypher.span_owners(), {"ids": chunk}):
                owners[row["id"]].add(row["session"])
        return owners

    def stored_sessions(self, session_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The given sessions the graph holds: id -> ingestedAt and digest."""
        if not session_ids:
            return {}
        rows = self.backend.query(cypher.STORED_SESSIONS, {"ids": list(session_ids)})
        return {r["id"]: {"ingestedAt": r["ingestedAt"], "digest": r["digest"], "refused": list(r["refused"] or ())} for r in rows}

    def stored_spans(self, session_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """session -> its span nodes, each with its `id`, the `digest` of its row
        and the `record` of its parsed span (None on the MASCall made for a
        session, and on nodes written before records were kept), `props` (every
        property) and the contents of its `input` and `output` states."""
        out: dict[str, list[dict[str, Any]]] = defaultdict(list)
        if session_ids:
            for row in self.backend.query(cypher.stored_spans(), {"ids": list(session_ids)}):
                props = row["props"]
                out[row["session"]].append(
                    {
                        "id": props["id"],
                        "digest": props.get(cypher.INGEST_DIGEST),
                        "record": props.get(cypher.INGEST_SPAN),
                        "props": props,
                        "input": row["input"],
                        "output": row["output"],
                    }
                )
        return out

    def stored_span_digests(self, session_ids: Sequence[str]) -> dict[str, dict[str, str | None]]:
        """session -> span id -> digest of the row it was ingested from."""
        out: dict[str, dict[str, str | None]] = defaultdict(dict)
        if session_ids:
            for row in self.backend.query(cypher.stored_span_digests(), {"ids": list(session_ids)}):
                out[row["session"]][row["id"]] = row["digest"]
        return out

    # -- reading sessions --------------------------------------------------

    def session_ids(self) -> list[str]:
        return [r["id"] for r in self.backend.query(cypher.LIST_SESSIONS)]

    def existing_sessions(self, session_ids: Sequence[str]) -> set[str]:
        return {r["id"] for r in self.backend.query(cypher.EXISTING_SESSIONS, {"ids": list(session_ids)})}

    def resolve_sessions(self, session_ids: Sequence[str], ambiguous: dict[str, list[str]] | None = None) -> dict[str, str]:
        """Each given id -> the id of the Session it names, for the ids that name one.
        An id the graph holds names itself; a raw platform id (`<app>_<uuid>`, as
        the queue message carries it) names the session stored under the part after
        an underscore whose app is the part before it, as the platform strips it.
        Raises AmbiguousSessionError when two stored sessions answer to one id, or
        with `ambiguous` given, records it there (id -> the candidates) instead."""
        from ..errors import AmbiguousSessionError

        ids = list(dict.fromkeys(session_ids))
        suffixes: dict[str, list[tuple[str, str]]] = {}
        for raw in ids:
            for i, ch in enumerate(raw):
                if ch == "_" and 0 < i < len(raw) - 1:
                    suffixes.setdefault(raw, []).append((raw[:i], raw[i + 1 :]))
        asked = set(ids) | {bare for pairs in suffixes.values() for _, bare in pairs}
        held: dict[str, str | None] = {}
        for chunk in _chunks(sorted(asked), 5000):
            held.update({r["id"]: r["app"] for r in self.backend.query(cypher.SESSIONS_WITH_APP, {"ids": chunk})})
        out: dict[str, str] = {}
        for raw in ids:
            if raw in held:
                out[raw] = raw
                continue
            found = [bare for app, bare in suffixes.get(raw, ()) if bare in held and held[bare] in (None, app)]
            if len(found) > 1:
                if ambiguous is None:
                    raise AmbiguousSessionError(raw, found)
                ambiguous[raw] = sorted(found)
                continue
            if found:
                out[raw] = found[0]
        return out

    def unknown_sessions_error(self, session_ids: Sequence[str]) -> "UnknownSessionError":
        """The error for ids no Session answers to, naming those the graph holds
        calls of (under the id or, for a raw platform id, its bare part)."""
        from ..errors import UnknownSessionError

        candidates: dict[str, str] = {}
        for raw in session_ids:
            candidates[raw] = raw
            for i, ch in enumerate(raw):
                if ch == "_" and 0 < i < len(raw) - 1:
                    candidates.setdefault(raw[i + 1 :], raw)
        counts: dict[str, int] = defaultdict(int)
        for chunk in _chunks(sorted(candidates), 5000):
            for row in self.backend.query(cypher.CALLS_OF_SESSIONS, {"ids": chunk}):
                counts[candidates[row["session"]]] += int(row["n"])
        return UnknownSessionError(list(session_ids), dict(counts))

    def stamp_unseen_sessions(self, limit: int) -> int:
        """Give up to `limit` sessions without `ingestedAt` (written by another
        producer) the time of now; returns how many were stamped."""
        rows = self.backend.write([(cypher.STAMP_UNSEEN_SESSIONS, {"limit": limit, "now": round(time.time(), 3)})])
        return int(rows[-1][0]["n"]) if rows and rows[-1] else 0

    def calls_without_session(self) -> dict[str, dict[str, int]]:
        """session id -> call label -> how many calls name that session while the
        graph holds no Session node for it."""
        out: dict[str, dict[str, int]] = defaultdict(dict)
        for row in self.backend.query(cypher.CALLS_WITHOUT_SESSION):
            out[row["session"]][row["label"]] = int(row["n"])
        return dict(out)

    def sessions_ingested_after(self, mark: float, last: str, limit: int) -> list[tuple[str, float]]:
        """Up to `limit` sessions after the (ingestedAt, id) key, in that order, through
        an index on ingestedAt (made on first use)."""
        if not self._ingested_at_indexed:
            self.backend.ensure_indexes([cypher.ingested_at_index(self.backend.name)])
            self._ingested_at_indexed = True
        rows = self.backend.query(cypher.SESSIONS_INGESTED_AFTER, {"mark": mark, "last": last, "limit": limit})
        return [(r["id"], float(r["at"])) for r in rows]

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
        unnamed: set[str] = set()
        for row in rows:
            props = {k: v for k, v in row["props"].items() if v is not None}
            label = Label(row["label"])
            session_id = props.get("sessionId") or props["id"]
            if _lacks_own_name(label, props):
                unnamed.add(session_id)
            nodes[session_id].append(Node(label, props))
            for parent in row["parents"] or ():
                if parent is not None:
                    edges[session_id].append(Edge(parent, props["id"]))
        if unnamed:
            self._name_from_structural_nodes(nodes, sorted(unnamed))
        contexts = {}
        for session_id, session_nodes in nodes.items():
            if any(n.label is Label.SESSION for n in session_nodes):
                contexts[session_id] = SessionContext.build(session_nodes, edges[session_id])
        return contexts

    def _name_from_structural_nodes(self, nodes: dict[str, list[Node]], session_ids: list[str]) -> None:
        """The platform's graph names agents, models, tools and apps only on the
        structural node behind a call (see core.recorded): copy them onto the calls
        that lack their own, in place."""
        names = {
            row["id"]: (row["named"], row["namedProvider"])
            for row in self.backend.query(cypher.names_behind_calls(), {"ids": session_ids})
        }
        for session_id in session_ids:
            for node in nodes[session_id]:
                named, provider = names.get(node.props.get("id"), (None, None))
                prop = "appName" if node.label is Label.SESSION else NAMED_BY.get(node.label, (None,))[0]
                if named is not None and prop and prop not in node.props:
                    node.props[prop] = named
                if provider and "provider" not in node.props:
                    node.props["provider"] = provider

    def read_texts(self, session_ids: Sequence[str]) -> dict[str, dict[str, "CallText"]]:
        """session -> call id -> its text (states, messages, tool definition), in
        one round trip. Read only for judged metrics: deterministic runs never
        pay for the text."""
        from ..core.recorded import is_placeholder_text
        from ..core.text import CallText, parse_messages

        out: dict[str, dict[str, CallText]] = {sid: {} for sid in session_ids}
        if not session_ids:
            return out
        for row in self.backend.query(cypher.read_texts(), {"ids": list(session_ids)}):
            out.setdefault(row["session"], {})[row["id"]] = CallText(
                # The platform's normalizer stores "(no content recorded)" for no text.
                input=None if is_placeholder_text(row["input"]) else row["input"],
                output=None if is_placeholder_text(row["output"]) else row["output"],
                input_messages=parse_messages(row["inputMessages"]),
                output_messages=parse_messages(row["outputMessages"]),
                tool_description=row["toolDescription"],
                tool_parameters=row["toolParameters"],
            )
        return out

    # -- results -----------------------------------------------------------

    def write_metrics(self, metrics: Sequence[MetricNode]) -> None:
        rows = [m.model_dump() for m in metrics]
        if rows:
            self.backend.write([(cypher.MERGE_METRICS, {"rows": rows})])

    def write_results(self, metric: MetricNode, scope: Scope, results: Sequence[MetricResultNode]) -> list[str]:
        """Write one metric's results at one scope as one statement: the whole batch
        or none of it. Returns the ids of entities that were not found (not written)."""
        rows = [r.as_row() for r in results]
        metric_row = (cypher.MERGE_METRICS, {"rows": [metric.model_dump()]})
        merge = [metric_row, *([(cypher.write_results(Label(scope.value)), {"rows": rows})] if rows else [])]
        # Neo4j: a first evaluation creates its results; a batch holding any stored
        # result (a re-evaluation, a retried write) or one another run stores
        # meanwhile (the create then fails whole) merges them. FalkorDB runs one
        # statement at a time: one statement creates the new and updates the rest.
        if rows and self.backend.name == "falkordb":
            statement = cypher.upsert_results(Label(scope.value), intern=getattr(self.backend, "has_intern", False))
            out = self.backend.write([metric_row, (statement, {"rows": rows})])
        elif rows and self.backend.enforces_unique_ids and not self.backend.query(cypher.RESULT_STORED, {"id": rows[0]["id"]})[0]["n"]:
            try:
                out = self.backend.write([metric_row, (cypher.create_results(Label(scope.value)), {"rows": rows})])
            except DuplicateIdError:
                out = self.backend.write(merge)
        else:
            out = self.backend.write(merge)
        if not rows or out[-1][0]["written"] == len(rows):
            return []
        # Some entities are not in the graph (rare): which, in a second look.
        attached = {r["id"] for r in self.backend.query(cypher.RESULTS_ATTACHED, {"ids": [r["id"] for r in rows]})}
        return [r["entityId"] for r in rows if r["id"] not in attached]

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
        return [_result_props(row["props"]) for row in rows]

    def select_results(
        self, session_ids: Sequence[str], *, keys: Sequence[str] | None = None, scopes: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """The sessions' results, only of the metrics `keys` (`Scope/provider.Name`)
        or at the `scopes` when given; one query."""
        params: dict[str, Any] = {"ids": list(session_ids)}
        if keys:
            params["keys"] = list(keys)
        if scopes:
            params["scopes"] = list(scopes)
        rows = self.backend.query(cypher.select_results(keys=bool(keys), scopes=bool(scopes)), params)
        return [_result_props(row["props"]) for row in rows]

    def select_sessions(
        self,
        *,
        ids: Sequence[str] | None = None,
        app: str | None = None,
        since: float | None = None,
        until: float | None = None,
        evaluated: bool | None = None,
    ) -> list[dict[str, Any]]:
        """Sessions by the filters given (start time in Unix seconds, half-open), with
        how many results each holds (see cypher.select_sessions)."""
        given = {k: v for k, v in {"ids": None if ids is None else list(ids), "app": app, "since": since, "until": until}.items() if v is not None}
        statement = cypher.select_sessions(**{k: True for k in given}, evaluated=evaluated)
        return self.backend.query(statement, given)

    # -- population metrics ------------------------------------------------

    def session_digests(self) -> list[dict[str, Any]]:
        """Every session's id, app and row digest (see cypher.SESSION_DIGESTS): a
        light listing, no subgraph read."""
        return self.backend.query(cypher.SESSION_DIGESTS)

    def read_population_states(self, *, name: str, provider: str, version: int) -> dict[str, str]:
        """app -> the JSON state a population metric saved for it."""
        rows = self.backend.query(cypher.READ_POPULATION_STATES, {"name": name, "provider": provider, "version": version})
        return {r["app"]: r["state"] for r in rows}

    def write_population(
        self,
        metric: MetricNode,
        states: Sequence[Mapping[str, Any]],
        results: Sequence[MetricResultNode],
        stale_result_ids: Sequence[str],
    ) -> None:
        """States, results and removals of one population metric as one statement."""
        params = {
            "metrics": [metric.model_dump()],
            "states": [dict(s) for s in states],
            "rows": [r.as_row() for r in results],
            "stale": list(stale_result_ids),
        }
        self.backend.write([(cypher.WRITE_POPULATION, params)])

    def count_results(self) -> int:
        return int(self.backend.query(cypher.COUNT_RESULTS)[0]["n"])

    def property_keys(self, label: Label) -> set[str]:
        """Property names seen on (a sample of) nodes of one label, with those its
        nodes have through the structural node behind them (the platform's graph
        names agents, models, tools and apps only there)."""
        keys = {r["k"] for r in self.backend.query(cypher.LABEL_PROPERTY_KEYS, {"label": label.value})}
        if keys and (linked := cypher.linked_property_keys(label)):
            keys |= {r["k"] for r in self.backend.query(linked) if r["k"]}
        return keys

    # -- queries over results (mce serve) ----------------------------------

    def rollup_results(
        self,
        *,
        name: str,
        provider: str,
        scope: Scope,
        version: int,
        by: str | None = None,
        filters: Mapping[str, Any] | None = None,
    ) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
        """One metric's results grouped by the cut `by`, with the given filters
        (session_id, app, agent, since, until): the statement, its parameters and the
        rows (see cypher.rollup_results)."""
        given = {k: v for k, v in (filters or {}).items() if v is not None}
        statement = cypher.rollup_results(
            Label(scope.value),
            by,
            session="session_id" in given,
            app="app" in given,
            agent="agent" in given,
            since="since" in given,
            until="until" in given,
        )
        params = {"name": name, "provider": provider, "scope": scope.value, "version": version, **given}
        return statement, params, self.backend.query(statement, params)

    def newest_evaluated(self, *, name: str, provider: str, scope: Scope, version: int) -> tuple[float | None, int]:
        """Start time of the newest session holding a result of this metric, and how
        many sessions hold one."""
        rows = self.backend.query(
            cypher.NEWEST_EVALUATED, {"name": name, "provider": provider, "scope": scope.value, "version": version}
        )
        if not rows:
            return None, 0
        return rows[0]["newest"], int(rows[0]["sessions"] or 0)

    def result_vocabulary(self) -> dict[str, set[str]]:
        """Agent, tool, model and app names the graph holds, by kind."""
        out: dict[str, set[str]] = defaultdict(set)
        for row in self.backend.query(cypher.RESULT_VOCABULARY):
            if row["name"]:
                out[row["kind"]].add(str(row["name"]))
        return dict(out)


def _lacks_own_name(label: Label, props: dict) -> bool:
    """Whether a node read back lacks the name the platform's graph keeps on the
    structural node behind it (an LLM call: also its provider)."""
    if label is Label.SESSION:
        return "appName" not in props
    if label not in NAMED_BY:
        return False
    return NAMED_BY[label][0] not in props or (label is Label.LLM_CALL and "provider" not in props)
