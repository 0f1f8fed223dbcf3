"""The embedded graph: one shared server, results as ontology nodes, values as
parameters."""

from __future__ import annotations

import json
import multiprocessing
import os
import time

import pytest

from mce_dagster.core.models import MetricNode, MetricResultNode, result_id
from mce_dagster.core.ontology import Scope
from mce_dagster.graph.embedded import EmbeddedFalkorDB
from mce_dagster.ingest import ingest_paths
from test_ingest import row

METRIC = MetricNode(name="Probe", provider="native", scope=["Session"], unit="x", valueRange="[0, null]", description="d", version=1)


def result(entity: str, session: str, value: float, version: int = 1, **extra) -> MetricResultNode:
    return MetricResultNode(
        id=result_id("Probe", "native", entity, version), name="Probe", provider="native", scope=Scope.SESSION,
        entityId=entity, sessionId=session, result=value, metricVersion=version, computedAt=time.time(), **extra,
    )


@pytest.fixture(scope="module")
def kg(backend_kg):
    """Every test of this module runs on the embedded FalkorDB and on Neo4j."""
    return backend_kg


@pytest.fixture(scope="module")
def two_sessions(kg, tmp_path_factory):
    path = tmp_path_factory.mktemp("g") / "two.json"
    path.write_text(json.dumps([row("w1", "a.workflow", session="g1"), row("w2", "a.workflow", session="g2")]))
    ingest_paths([path], kg)
    return ["g1", "g2"]


def test_results_are_written_linked_and_idempotent(kg, two_sessions):
    missing = kg.write_results(METRIC, Scope.SESSION, [result("g1", "g1", 1.0), result("g2", "g2", 2.0)])
    assert missing == []
    linked = kg.backend.query(
        "MATCH (x:MetricResult)-[:ofMetricType]->(m:Metric {name: 'Probe'}) MATCH (x)-[:measures]->(s:Session) "
        "RETURN s.id AS s, x.result AS v ORDER BY s"
    )
    assert linked == [{"s": "g1", "v": 1.0}, {"s": "g2", "v": 2.0}]
    # The same version again replaces the observation; a new version adds one.
    kg.write_results(METRIC, Scope.SESSION, [result("g1", "g1", 5.0)])
    kg.write_results(METRIC, Scope.SESSION, [result("g1", "g1", 7.0, version=2)])
    values = sorted((r["metricVersion"], r["result"]) for r in kg.read_results(["g1"]) if r["name"] == "Probe")
    assert values == [(1, 5.0), (2, 7.0)]


def test_new_results_are_created_and_one_stored_meanwhile_is_merged_not_doubled(kg, two_sessions, monkeypatch):
    sent: list[str] = []
    write = kg.backend.write

    def spy(statements):
        sent.extend(
            "upsert" if "OPTIONAL MATCH (stored:MetricResult" in s else "create" if "CREATE (x:MetricResult)" in s else "merge"
            for s, _ in statements
            if "(x:MetricResult" in s and "UNWIND" in s
        )
        return write(statements)

    monkeypatch.setattr(kg.backend, "write", spy)
    assert kg.write_results(METRIC, Scope.SESSION, [result("g1", "g1", 1.0, version=8), result("g2", "g2", 2.0, version=8)]) == []
    assert sent == (["create"] if kg.backend.enforces_unique_ids else ["upsert"])
    # g2 stored meanwhile (another run): g1's first row is new, so Neo4j tries the
    # create, which fails whole on g2's id, and merges instead.
    kg.write_results(METRIC, Scope.SESSION, [result("g2", "g2", 3.0, version=9)])
    sent.clear()
    assert kg.write_results(METRIC, Scope.SESSION, [result("g1", "g1", 4.0, version=9), result("g2", "g2", 5.0, version=9)]) == []
    # FalkorDB runs one statement at a time: one statement creates g1's, updates g2's.
    assert sent == (["create", "merge"] if kg.backend.enforces_unique_ids else ["upsert"])
    rows = kg.backend.query(
        "MATCH (x:MetricResult {name: 'Probe'})-[:ofMetricType]->(:Metric {name: 'Probe'}) WHERE x.metricVersion IN [8, 9] "
        "MATCH (x)-[:measures]->(s:Session) RETURN x.metricVersion AS v, s.id AS s, x.result AS r ORDER BY v, s"
    )
    assert rows == [{"v": 8, "s": "g1", "r": 1.0}, {"v": 8, "s": "g2", "r": 2.0}, {"v": 9, "s": "g1", "r": 4.0}, {"v": 9, "s": "g2", "r": 5.0}]


def test_a_result_is_stored_with_exactly_its_fields_and_a_rewrite_replaces_them(kg, two_sessions):
    def stored(node: MetricResultNode) -> list[dict]:
        rows = kg.backend.query("MATCH (x:MetricResult {id: $id}) RETURN properties(x) AS p", {"id": node.id})
        return [dict(r["p"]) for r in rows]

    def expected(node: MetricResultNode) -> dict:
        return {k: v for k, v in node.as_row().items() if v is not None}

    first = result("g1", "g1", 0.5, version=11, reasoning="because", numerator=1.0, denominator=2.0, runId="r1",
                   evaluationModel="m", evaluationMethod="judge")
    first.computedAt = 1796616603.5  # FalkorDB answers doubles with 15 significant digits
    kg.write_results(METRIC, Scope.SESSION, [first])
    assert stored(first) == [expected(first)]
    # The same observation again, without a reasoning, a ratio or a model: they are gone.
    again = result("g1", "g1", 0.75, version=11, runId="r2")
    again.computedAt = 1796616604.5
    kg.write_results(METRIC, Scope.SESSION, [again])
    assert stored(again) == [expected(again)]
    links = kg.backend.query(
        "MATCH (x:MetricResult {id: $id}) MATCH (x)-[r]->() RETURN type(r) AS t ORDER BY t", {"id": first.id}
    )
    assert [r["t"] for r in links] == ["measures", "ofMetricType"]


def test_a_result_for_a_missing_entity_is_not_written(kg, two_sessions):
    missing = kg.write_results(METRIC, Scope.SESSION, [result("nope", "g1", 3.0), result("g2", "g2", 4.0)])
    assert missing == ["nope"]
    assert not kg.backend.query("MATCH (x:MetricResult {entityId: 'nope'}) RETURN x.id AS id")


def test_invalid_results_do_not_validate():
    with pytest.raises(ValueError, match="finite"):
        result("g1", "g1", float("nan"))
    with pytest.raises(ValueError):
        MetricResultNode.model_validate({**result("g1", "g1", 1.0).model_dump(), "result": "high"})


def test_values_are_parameters_not_cypher(kg, two_sessions):
    hostile = "x'}) DETACH DELETE n //\" \\ \n MATCH (n) RETURN n"
    kg.write_results(METRIC, Scope.SESSION, [result("g2", "g2", 1.0, reasoning=hostile)])
    stored = [r for r in kg.read_results(["g2"]) if r["name"] == "Probe" and r["metricVersion"] == 1][0]
    assert stored["reasoning"] == hostile
    assert kg.count_sessions() >= 2


def test_text_no_graph_can_carry_is_escaped_not_an_error(kg, two_sessions):
    # A lookup by an id holding a NUL or a lone surrogate finds nothing, on either backend.
    assert kg.existing_sessions(["g1\x00", "g1\ud800", "g1"]) == {"g1"}
    assert kg.read_contexts(["g2\x00"]) == {}
    # A judge's reply holding them is stored escaped, not a failed batch.
    kg.write_results(METRIC, Scope.SESSION, [result("g2", "g2", 1.0, version=3, reasoning="a\x00b\udc00c")])
    stored = [r for r in kg.read_results(["g2"]) if r["name"] == "Probe" and r["metricVersion"] == 3][0]
    assert stored["reasoning"] == "a\\u0000b\\udc00c"


def _ingest_in_child(home: str, path: str, queue) -> None:
    os.environ["MCE_HOME"] = home
    from mce_dagster.graph.store import KnowledgeGraph, embedded_backend
    from mce_dagster.ingest import ingest_paths as ingest

    report = ingest([path], KnowledgeGraph(embedded_backend(__import__("pathlib").Path(home))), batch_size=5)
    queue.put(len(report.sessions))


def test_processes_share_one_store(tmp_path):
    """Four processes start at once on a fresh MCE_HOME: one server is started,
    and every session each of them writes is there afterwards."""
    home = tmp_path / "h"
    paths = []
    for p in range(4):
        rows = [row(f"w{p}-{i}", "a.workflow", session=f"proc{p}-s{i}") for i in range(25)]
        path = tmp_path / f"p{p}.json"
        path.write_text(json.dumps(rows))
        paths.append(str(path))
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_ingest_in_child, args=(str(home), p, queue)) for p in paths]
    try:
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(120)
        assert [proc.exitcode for proc in procs] == [0, 0, 0, 0]
        assert sorted(queue.get(timeout=5) for _ in procs) == [25, 25, 25, 25]
        from mce_dagster.graph.store import KnowledgeGraph, embedded_backend

        assert KnowledgeGraph(embedded_backend(home)).count_sessions() == 100
    finally:
        EmbeddedFalkorDB(home).stop()


def test_a_killed_server_keeps_what_was_written_from_its_append_only_file(tmp_path):
    import signal

    from mce_dagster.graph.store import KnowledgeGraph, embedded_backend

    home = tmp_path / "h3"
    server = EmbeddedFalkorDB(home)
    kg = KnowledgeGraph(embedded_backend(home))
    try:
        kg.backend.query("CREATE (:Session {id: 'kept', sessionId: 'kept', startTime: 0.0})")
        # No periodic snapshot: the append-only file alone is the store.
        assert kg.backend._db.connection.config_get("save") == {"save": ""}
        # One query at a time (concurrent reads once crashed it; embedded.py says when).
        assert kg.backend._db.connection.execute_command("GRAPH.CONFIG", "GET", "THREAD_COUNT") in (["THREAD_COUNT", 1], [b"THREAD_COUNT", 1])
        time.sleep(1.5)  # appendfsync everysec
        os.kill(server.pid(), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while server.is_running() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not server.is_running()
        assert not list(home.rglob("graph.rdb"))  # nothing came from a snapshot
        assert KnowledgeGraph(embedded_backend(home)).session_ids() == ["kept"]
    finally:
        server.stop()


def test_server_outlives_its_starter_and_keeps_data(tmp_path):
    from mce_dagster.graph.store import KnowledgeGraph, embedded_backend

    home = tmp_path / "h2"
    server = EmbeddedFalkorDB(home)
    kg = KnowledgeGraph(embedded_backend(home))
    kg.backend.query("CREATE (:Session {id: 'kept', sessionId: 'kept', startTime: 0.0})")
    pid = server.pid()
    assert server.ensure_running() and server.pid() == pid  # a second start finds it up
    assert server.stop() is True and not server.is_running()
    kg2 = KnowledgeGraph(embedded_backend(home))  # restarted from its files
    assert kg2.session_ids() == ["kept"]
    server.stop()


class _LoadingServer:
    """A Unix socket that speaks RESP like a redis-server still reading its files:
    every command gets `-LOADING` until `ready` is set, then PING gets `+PONG`."""

    def __init__(self, path):
        import socket
        import threading

        self.ready = threading.Event()
        self.silent = threading.Event()  # replaying its append-only file: no answer at all
        self.commands = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        self._sock.listen(16)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        import threading

        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn):
        try:
            self._converse(conn)
        except OSError:
            pass  # the client gave up waiting and closed its end

    def _converse(self, conn):
        with conn:
            while data := conn.recv(4096):
                self.commands += 1
                while self.silent.is_set():
                    time.sleep(0.01)
                if not self.ready.is_set():
                    reply = b"-LOADING Redis is loading the dataset in memory\r\n"
                elif b"HELLO" in data.upper():  # the client's RESP3 handshake
                    reply = b"%2\r\n$6\r\nserver\r\n$5\r\nredis\r\n$5\r\nproto\r\n:3\r\n"
                else:  # the client's other setup commands get OK; PING gets PONG
                    reply = b"+PONG\r\n" if b"PING" in data.upper() else b"+OK\r\n"
                conn.sendall(reply * max(1, data.count(b"*")))

    def close(self):
        self._sock.close()


def test_a_server_silent_while_it_replays_its_append_only_file_is_loading_not_down(tmp_path, monkeypatch):
    """Replaying 950 MB of appended writes after a 100,000-session ingestion, the real
    server accepted connections and answered nothing for minutes; taken for down, it
    failed the backfill that started it."""
    import threading

    monkeypatch.setattr(EmbeddedFalkorDB, "PROBE_TIMEOUT_S", 0.3)
    server = EmbeddedFalkorDB(tmp_path / "h5")
    fake = _LoadingServer(server.socket_path)
    try:
        fake.silent.set()
        assert server._state() == "loading"
        threading.Timer(1.0, fake.silent.clear).start()  # then LOADING for a while, then up
        threading.Timer(2.0, fake.ready.set).start()
        assert server.ensure_running(timeout_s=0.5, load_timeout_s=30) == server.socket_path
        assert server.pid() is None and not server.log_file.exists()  # no second server
    finally:
        fake.silent.clear()
        fake.close()
    server.socket_path.unlink()
    assert server._state() == "down"


def test_a_server_loading_a_large_graph_is_waited_for_and_never_started_twice(tmp_path):
    """A large graph takes minutes to load, answering LOADING meanwhile: callers wait
    (up to the load deadline), and none starts a second server on the same files."""
    import threading

    from mce_dagster.graph.embedded import EmbeddedServerError

    server = EmbeddedFalkorDB(tmp_path / "h4")
    fake = _LoadingServer(server.socket_path)
    try:
        assert server._state() == "loading" and not server.is_running()
        started = time.monotonic()
        with pytest.raises(EmbeddedServerError, match="still loading its data at the deadline"):
            server.ensure_running(timeout_s=0.5, load_timeout_s=1.5)
        assert time.monotonic() - started >= 1.5
        assert server.pid() is None and not server.log_file.exists()  # no server was started
        threading.Timer(1.0, fake.ready.set).start()
        assert server.ensure_running(timeout_s=0.5, load_timeout_s=30) == server.socket_path
        assert fake.commands > 3  # it asked again while the graph loaded
    finally:
        fake.close()


def test_a_falkordb_without_intern_gets_results_written_without_it():
    from redis.exceptions import ResponseError

    from mce_dagster.graph import cypher
    from mce_dagster.graph.store import FalkorDBBackend

    class OldServer:
        calls = 0

        def query(self, statement, params):
            self.calls += 1
            if self.calls == 1:  # the probe, too, waits out a server preparing a fork
                raise ResponseError("BUSY preparing to fork")
            raise ResponseError("Unknown function 'intern'")

    backend = FalkorDBBackend.__new__(FalkorDBBackend)
    backend._graph = OldServer()
    assert backend.has_intern is False
    assert backend._graph.calls == 2
    assert "intern(" not in cypher.upsert_results(Scope.SESSION, intern=False)
    assert "sessionId: intern(r.sessionId)" in cypher.upsert_results(Scope.SESSION, intern=True)


def test_the_embedded_server_interns_result_strings(embedded_kg):
    assert embedded_kg.backend.has_intern is True


def test_a_statement_the_server_answers_busy_is_tried_again_then_given_up():
    from redis.exceptions import ResponseError

    from mce_dagster.graph.store import FalkorDBBackend

    class Result:
        header, result_set = [[1, "n"]], [[1]]

    class ForkingServer:
        def __init__(self, busy: int):
            self.busy, self.calls = busy, 0

        def query(self, statement, params):
            self.calls += 1
            if self.calls <= self.busy:
                raise ResponseError("BUSY preparing to fork")
            return Result()

    backend = FalkorDBBackend.__new__(FalkorDBBackend)
    backend._graph = ForkingServer(busy=3)
    assert backend.query("RETURN 1 AS n") == [{"n": 1}]
    assert backend._graph.calls == 4
    backend._graph, backend.BUSY_WAIT_S = ForkingServer(busy=10**6), 0.5
    with pytest.raises(ResponseError, match="BUSY"):
        backend.query("RETURN 1 AS n")
    backend._graph = ForkingServer(busy=0)
    backend._graph.query = lambda s, p: (_ for _ in ()).throw(ResponseError("Unknown function 'x'"))
    with pytest.raises(ResponseError, match="Unknown function"):
        backend.query("RETURN x()")
