"""The sensors against the real RabbitMQ (`make services`), on a temporary Dagster
instance and the module's embedded graph.

`Daemon` does what the sensor daemon does with a tick's result: add the partitions,
store the backfill, keep the cursor; it can also lose a tick's result (the daemon
died before storing it) or store the partitions and lose the request (it died in
between), the two crashes a tick can meet.
"""

from __future__ import annotations

import json
import re
import time
import uuid

import dagster as dg
import pytest
from dagster._core.execution.backfill import PartitionBackfill
from dagster._core.utils import make_new_backfill_id

from conftest import require

from mce_dagster import queue as q
from mce_dagster.defs.partitions import SESSIONS
from mce_dagster.defs.sensors import POLL_SENSOR, QUEUE_SENSOR, evaluation_request
from mce_dagster.settings import Settings

pytestmark = pytest.mark.service


def _rabbit_up() -> bool:
    try:
        q.connect(Settings.from_env(), timeout=3).close()
        return True
    except Exception:
        return False


@pytest.fixture(scope="module")
def sessions(kg, tmp_path_factory):
    """45 sessions in the graph, and 3 more written to a file but not ingested."""
    from mce_dagster.ingest import ingest_paths
    from mce_dagster.synthetic import write_export

    require(_rabbit_up(), "RabbitMQ does not answer (run `eval \"$(make -s services)\"`)")
    root = tmp_path_factory.mktemp("sensor-sessions")
    write_export(root / "in.json", 45, seed=101)
    write_export(root / "late.json", 3, seed=202)
    ids = ingest_paths([root / "in.json"], kg).sessions
    assert len(ids) == 45
    return {"ids": ids, "late": root / "late.json"}


@pytest.fixture
def queue_name(monkeypatch, sessions):
    name = f"test_sensors_{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("MCE_SESSION_QUEUE", name)
    yield name
    connection = q.connect(Settings.from_env())
    ch = connection.channel()
    ch.queue_delete(name)
    ch.queue_delete(q.dlq_name(name))
    connection.close()


def publish(*bodies: bytes) -> None:
    settings = Settings.from_env()
    with q.channel(settings) as ch:
        for body in bodies:
            q.publish(ch, settings.session_queue, body)


def announce(*ids: str) -> None:
    publish(*(q.announcement(i) for i in ids))


def depth(name: str) -> int:
    with q.channel(Settings.from_env()) as ch:
        return ch.queue_declare(name, durable=True, passive=True).method.message_count


def drain(name: str) -> list[tuple[bytes, dict]]:
    out = []
    with q.channel(Settings.from_env()) as ch:
        while True:
            method, props, body = ch.basic_get(name, auto_ack=True)
            if method is None:
                return out
            out.append((body, dict(props.headers or {})))


class Daemon:
    """The sensor daemon's part, over a temporary instance."""

    def __init__(self, instance: dg.DagsterInstance, sensor: str = QUEUE_SENSOR):
        from mce_dagster.definitions import defs

        self.defs = defs
        self.instance = instance
        self.name = sensor
        self.sensor = defs.get_sensor_def(sensor)
        self.cursor: str | None = None
        self.requested: list[str] = []  # every session a stored request covered, in order
        self.requests = 0
        self.durations: list[float] = []

    def evaluate(self) -> dg.SensorResult:
        # The definitions of the settings of this moment (a test changes a variable
        # between ticks), as the daemon has them after a reload of the code location.
        from mce_dagster.definitions import defs

        self.defs, self.sensor = defs, defs.get_sensor_def(self.name)
        context = dg.build_sensor_context(
            instance=self.instance,
            cursor=self.cursor,
            definitions=self.defs,
            resources={k: self.defs.resources[k] for k in ("knowledge_graph", "session_queue")},
        )
        started = time.monotonic()
        result = self.sensor(context)
        self.durations.append(time.monotonic() - started)
        return result

    def tick(self, crash: str | None = None) -> dg.SensorResult:
        """crash="before-storing": the result is lost; "after-partitions": the partitions
        are stored, the run request and cursor are not."""
        result = self.evaluate()
        if crash == "before-storing":
            return result
        for request in result.dynamic_partitions_requests:
            self.instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        if crash == "after-partitions":
            return result
        for request in result.run_requests:
            subset = request.asset_graph_subset
            assert subset is not None, "a tick asks for a backfill over its sessions"
            keys = sorted({ap.partition_key for ap in subset.iterate_asset_partitions()})
            self.instance.add_backfill(
                PartitionBackfill.from_asset_graph_subset(
                    backfill_id=make_new_backfill_id(), dynamic_partitions_store=self.instance,
                    backfill_timestamp=time.time(), asset_graph_subset=subset, tags=request.tags or {},
                    title=None, description=None, run_config=None,
                )
            )
            self.requested.extend(keys)
            self.requests += 1
        self.cursor = result.cursor
        return result

    def until_empty(self, queue: str, limit: int = 20) -> int:
        for n in range(1, limit + 1):
            self.tick()
            if depth(queue) == 0:
                return n
        raise AssertionError(f"the queue still holds {depth(queue)} message(s) after {limit} ticks")


@pytest.fixture
def daemon():
    with dg.instance_for_test() as instance:
        yield Daemon(instance)


def test_both_sensors_are_off_by_default_and_tick_at_the_configured_interval():
    from mce_dagster.definitions import defs

    for name in (QUEUE_SENSOR, POLL_SENSOR):
        sensor = defs.get_sensor_def(name)
        assert sensor.default_status == dg.DefaultSensorStatus.STOPPED
        assert sensor.minimum_interval_seconds == Settings.from_env().sensor_interval


def test_duplicates_and_repeats_start_one_evaluation_each(daemon, queue_name, sessions):
    a, b, c, d = sessions["ids"][:4]
    announce(a, b, a, c, a, d, b)
    first = daemon.tick()
    assert sorted(daemon.requested) == sorted([a, b, c, d]) and daemon.requests == 1
    assert [sorted(r.partition_keys) for r in first.dynamic_partitions_requests] == [sorted([a, b, c, d])]
    # The duplicates are acked; one copy of each session waits, unacked, for the next tick.
    assert depth(queue_name) == 4
    daemon.tick()
    assert depth(queue_name) == 0
    # Announced again later (a pipeline replaying): acked, nothing new.
    announce(c, a)
    daemon.until_empty(queue_name)
    assert sorted(daemon.requested) == sorted([a, b, c, d]) and daemon.requests == 1
    # The cursor forgets a session once Dagster shows its evaluation; a repeat after
    # that is stopped by the partition and the backfill that covers it.
    daemon.cursor = None
    announce(b, d)
    daemon.until_empty(queue_name)
    assert daemon.requests == 1


def test_redelivery_after_a_failed_tick(daemon, queue_name, sessions, monkeypatch):
    ids = sessions["ids"][4:10]
    announce(*ids)
    # 1. The daemon dies before storing anything: nothing was acked, all come back.
    daemon.tick(crash="before-storing")
    assert depth(queue_name) == len(ids) and daemon.requested == []
    # 2. The graph fails mid-tick: the sensor raises, nothing acked.
    from mce_dagster.graph import store

    def refuse(self, session_ids):
        raise ConnectionError("graph unreachable")

    with monkeypatch.context() as m:
        m.setattr(store.KnowledgeGraph, "existing_sessions", refuse)
        with pytest.raises(Exception, match="graph unreachable"):
            daemon.tick()
    assert depth(queue_name) == len(ids)
    # 3. The daemon dies between adding the partitions and reserving the request:
    #    the next tick finds them registered but never requested, and requests them.
    daemon.tick(crash="after-partitions")
    assert all(daemon.instance.has_dynamic_partition(SESSIONS, k) for k in ids)
    assert depth(queue_name) == len(ids) and daemon.requested == []
    daemon.tick()
    assert sorted(daemon.requested) == sorted(ids)
    daemon.until_empty(queue_name)
    assert sorted(daemon.requested) == sorted(ids) and daemon.requests == 1


def test_malformed_messages_go_to_the_dead_letter_queue_with_the_reason(daemon, queue_name, sessions):
    good = sessions["ids"][10]
    bad = {
        b"not json": "not JSON",
        b"\xff\xfe{": "not JSON",
        b"[1, 2]": "not a JSON object",
        b'"a string"': "not a JSON object",
        b"{}": "no session_id",
        b'{"session": "x"}': "no session_id",
        b'{"session_id": 42}': "session_id is not a string",
        b'{"session_id": ""}': "session_id is empty",
        json.dumps({"session_id": "a\nb"}).encode(): "partition key",
    }
    publish(*bad, q.announcement(good))
    daemon.until_empty(queue_name)
    assert daemon.requested == [good]
    letters = drain(q.dlq_name(queue_name))
    assert sorted(body for body, _ in letters) == sorted(bad)
    for body, headers in letters:
        assert bad[body] in headers[q.REASON] and headers[q.REASON].startswith("malformed message")
        assert headers[q.SOURCE] == queue_name


def test_a_session_announced_before_it_is_in_the_graph(daemon, queue_name, sessions, kg, monkeypatch):
    from mce_dagster.ingest import ingest_paths

    late = session_ids_of(sessions["late"])
    assert len(late) == 3, late
    announce(late[0], "ghost-session")
    daemon.tick()
    assert daemon.requested == []
    # Both were republished to the tail with their attempts; neither is in the dead letters.
    assert depth(queue_name) == 2 and depth(q.dlq_name(queue_name)) == 0
    daemon.tick()
    ingest_paths([sessions["late"]], kg)
    daemon.tick()
    assert daemon.requested == [late[0]]
    # The ghost never arrives: dead-lettered once the wait is over.
    monkeypatch.setenv("MCE_ANNOUNCE_WAIT_SECONDS", "1")
    time.sleep(1.1)
    daemon.until_empty(queue_name)
    letters = drain(q.dlq_name(queue_name))
    assert [json.loads(body)["session_id"] for body, _ in letters] == ["ghost-session"]
    headers = letters[0][1]
    assert "not in the knowledge graph" in headers[q.REASON] and int(headers[q.ATTEMPTS]) >= 3
    assert daemon.requested == [late[0]]


def session_ids_of(path) -> list[str]:
    """The sessions of a synthetic export, without ingesting it."""
    ids: set[str] = set()
    for row in json.loads(path.read_text()):
        attrs = row["SpanAttributes"]
        ids.update(re.findall(r"session\.id.: .([^'\"]+)", attrs if isinstance(attrs, str) else json.dumps(attrs)))
    return sorted(ids)


def test_a_long_queue_is_drained_over_bounded_ticks(daemon, queue_name, sessions, monkeypatch):
    monkeypatch.setenv("MCE_SENSOR_BATCH", "10")
    ids = sessions["ids"][11:45]  # 34 sessions, each announced twice
    announce(*ids, *ids[::-1])
    ticks = daemon.until_empty(queue_name, limit=12)
    assert sorted(daemon.requested) == sorted(ids) and len(daemon.requested) == len(ids)
    # At most a batch per request, as few requests as the batch allows: 34 sessions
    # and their 34 duplicates in batches of 10.
    assert daemon.requests <= 7, daemon.requests
    assert ticks <= 9
    assert max(daemon.durations) < 10, daemon.durations


def test_the_poll_sensor_finds_sessions_without_a_partition_by_cursor(kg, sessions, monkeypatch):
    from mce_dagster.ingest import ingest_paths
    from mce_dagster.synthetic import write_export

    monkeypatch.setenv("MCE_SENSOR_BATCH", "20")
    with dg.instance_for_test() as instance:
        poll = Daemon(instance, POLL_SENSOR)
        # One session already registered and requested by the queue sensor.
        taken = sessions["ids"][0]
        instance.add_dynamic_partitions(SESSIONS, [taken])
        asset_keys = list(poll.sensor.asset_selection.resolve(poll.defs.resolve_asset_graph()))
        subset_request = evaluation_request([taken], asset_keys, QUEUE_SENSOR)
        instance.add_backfill(
            PartitionBackfill.from_asset_graph_subset(
                backfill_id=make_new_backfill_id(), dynamic_partitions_store=instance, backfill_timestamp=time.time(),
                asset_graph_subset=subset_request.asset_graph_subset, tags={}, title=None, description=None, run_config=None,
            )
        )
        stored = set(kg.session_ids())  # the suite's graph: other modules' sessions too
        for _ in range(len(stored) // 20 + 3):
            result = poll.tick()
            if not result.run_requests:
                break
        assert set(poll.requested) == stored - {taken} and len(poll.requested) == len(stored) - 1
        assert poll.requests <= -(-len(stored) // 20) + 1
        cursor = json.loads(poll.cursor)
        assert cursor["mark"] > 0
        # Nothing new: nothing requested, the cursor stays.
        assert not poll.tick().run_requests and json.loads(poll.cursor) == cursor
        # New sessions: only they.
        root = sessions["late"].parent
        write_export(root / "poll.json", 4, seed=303)
        new = ingest_paths([root / "poll.json"], kg).sessions
        poll.tick()
        assert set(poll.requested) == (stored - {taken}) | set(new)
