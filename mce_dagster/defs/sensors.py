"""Sensors that evaluate every new session once: one reads the RabbitMQ queue the
ingestion pipeline announces sessions on, one polls the graph for sessions with no
partition yet. Both are off by default (`dagster sensor start NAME`).

A tick registers the new sessions as partitions of `sessions` and asks for one
asset backfill over exactly those partitions (`RunRequest.for_asset_graph_subset`);
with every asset's `BackfillPolicy.single_run()` the backfill daemon launches one
run per contiguous range of them, and the keys a tick adds are contiguous.

The queue sensor's acknowledgement protocol (at least once, never twice):

- A message whose session is new (in the graph, no partition) is left
  *unacknowledged* in the tick that registers it and requests its evaluation; the
  session goes into the cursor's `pending`. Dagster stores that cursor together with
  the tick's reserved run requests, so "in `pending`" means "its evaluation is
  requested". Closing the connection returns the message to the queue.
- A message whose session is in `pending`, or is registered and known to Dagster
  (materialized, in progress, failed, or in a live backfill), is acknowledged and
  starts nothing: redeliveries and repeated announcements are no-ops.
- A registered session Dagster knows nothing of (the daemon died between adding the
  partition and reserving the run) is requested again.
- A malformed message goes to `QUEUE.dlq` with the reason in its headers, then is
  acknowledged; a session not yet in the graph is republished to the queue's tail
  with its attempts and first-seen time, then acknowledged, and dead-lettered once
  `MCE_ANNOUNCE_WAIT_SECONDS` have passed. Publishing always comes first (with
  publisher confirms), so a crash in between duplicates, never loses.
- A tick takes at most `MCE_SENSOR_BATCH` messages and stops fetching at half its
  time budget, well inside Dagster's 60 s tick time-out.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from .. import queue as q
from ..evaluation import SESSIONS_TAG
from ..errors import AmbiguousSessionError, InputError
from ..graph import KnowledgeGraph, describe_orphans
from ..instance.backfills import backfill_request, in_live_backfills
from ..settings import QueueSettings, Settings
from .assets import SESSION_CONTEXT_KEY
from .partitions import SESSIONS, sessions_partitions
from .resources import KnowledgeGraphResource, SessionQueueResource

log = logging.getLogger(__name__)

QUEUE_SENSOR = "session_queue_sensor"
POLL_SENSOR = "session_poll_sensor"
SENSOR_TAG = "mce/sensor"
#: a pending session is forgotten after this long even if Dagster never showed it
PENDING_TTL_SECONDS = 24 * 3600.0


# -- what Dagster already knows of a session ------------------------------------------


def already_requested(instance: dg.DagsterInstance, keys: Iterable[str]) -> set[str]:
    """The registered sessions whose evaluation Dagster has seen: materialized, in
    progress or failed, or inside a backfill that is still running."""
    keys = sorted(set(keys))
    if not keys:
        return set()
    status = instance.get_status_by_partition(SESSION_CONTEXT_KEY, keys, sessions_partitions) or {}
    known = {k for k, s in status.items() if s is not None}
    known |= in_live_backfills(instance, SESSION_CONTEXT_KEY, [k for k in keys if k not in known])
    return known


def registered(instance: dg.DagsterInstance, keys: Iterable[str]) -> set[str]:
    return {k for k in keys if instance.has_dynamic_partition(SESSIONS, k)}


def evaluation_request(keys: Sequence[str], asset_keys: Sequence[dg.AssetKey], sensor: str) -> dg.RunRequest:
    """One backfill over exactly these sessions, of every asset the evaluation
    materializes (`evaluation.plan(config).asset_keys`); the backfill daemon runs it
    per each asset's backfill policy."""
    return backfill_request(sessions_partitions, keys, asset_keys, {SENSOR_TAG: sensor, SESSIONS_TAG: str(len(keys))})


# -- the queue sensor --------------------------------------------------------------------


@dataclass
class QueueCursor:
    #: session -> [time its evaluation was requested, acknowledged since]
    pending: dict[str, list] = field(default_factory=dict)

    @classmethod
    def load(cls, raw: str | None) -> "QueueCursor":
        if not raw:
            return cls()
        try:
            data = json.loads(raw)
            return cls(pending={str(k): [float(v[0]), bool(v[1])] for k, v in data.get("pending", {}).items()})
        except (ValueError, TypeError, AttributeError, IndexError, KeyError):
            log.warning("unreadable %s cursor, starting afresh (registered partitions still stop repeats)", QUEUE_SENSOR)
            return cls()

    def dump(self) -> str:
        return json.dumps({"pending": self.pending}, sort_keys=True, separators=(",", ":"))


@dataclass
class _Message:
    tag: int
    headers: dict[str, Any]
    body: bytes
    session_id: str | None
    reason: str | None


@dataclass
class QueueTick:
    """What one tick did, for the tick's log, the tests and the bench."""

    fetched: int = 0
    requested: list[str] = field(default_factory=list)
    acked_known: int = 0
    acked_duplicates: int = 0
    dead_lettered: int = 0
    republished: int = 0
    held: int = 0

    def summary(self) -> str:
        return (
            f"{self.fetched} message(s): {len(self.requested)} session(s) requested (left unacked), "
            f"{self.acked_known} already requested and {self.acked_duplicates} duplicate(s) acked, "
            f"{self.dead_lettered} dead-lettered, {self.republished} not in the graph yet (republished)"
        )


def _dead_letter(ch, settings: QueueSettings, message: _Message, reason: str) -> None:
    headers = dict(message.headers)
    headers.update({q.REASON: reason, q.SOURCE: settings.session_queue})
    headers.setdefault(q.FIRST_SEEN, q.stamp(q.now()))
    q.publish(ch, q.dlq_name(settings.session_queue), message.body, headers)
    ch.basic_ack(message.tag)


def queue_tick(
    instance: dg.DagsterInstance,
    graph: KnowledgeGraph,
    settings: QueueSettings | Settings,
    cursor: QueueCursor,
    *,
    asset_keys: Sequence[dg.AssetKey],
    now: float | None = None,
) -> tuple[QueueTick, dg.SensorResult]:
    """One tick of `session_queue_sensor`: see the module's docstring."""
    started = time.monotonic()
    fetch_until = started + settings.sensor_tick_seconds / 2
    now = q.now() if now is None else now
    token = uuid.uuid4().hex
    report = QueueTick()
    connection = q.connect(settings)
    try:
        ch = connection.channel()
        ch.confirm_delivery()
        q.declare(ch, settings.session_queue)
        messages: list[_Message] = []
        # Messages of pending sessions (the ones the last ticks left unacked) are
        # acked on sight and do not count against the batch; a hard cap bounds them.
        fetched_cap = 4 * settings.sensor_batch
        while len(messages) < settings.sensor_batch and report.fetched < fetched_cap and time.monotonic() < fetch_until:
            method, props, body = ch.basic_get(settings.session_queue, auto_ack=False)
            if method is None:
                break
            report.fetched += 1
            headers = dict(props.headers or {})
            if headers.get(q.TICK) == token:  # republished by this tick: the queue has wrapped
                report.held += 1
                break
            try:
                session_id, reason = q.parse(body).session_id, None
            except InputError as exc:
                session_id, reason = None, f"malformed message: {exc}"
            if session_id is not None and session_id in cursor.pending:
                ch.basic_ack(method.delivery_tag)
                cursor.pending[session_id][1] = True
                report.acked_known += 1
                continue
            messages.append(_Message(method.delivery_tag, headers, body, session_id, reason))

        # The platform's message carries the raw session id (`<app>_<uuid>`); the
        # graph may store the session under the bare one. Resolved ids go on from here.
        ambiguous: dict[str, list[str]] = {}
        raw_ids = list(dict.fromkeys(m.session_id for m in messages if m.session_id is not None))
        stored = graph.resolve_sessions(raw_ids, ambiguous) if raw_ids else {}
        for i, m in enumerate(messages):
            if m.session_id in ambiguous:
                reason = str(AmbiguousSessionError(m.session_id, ambiguous[m.session_id]))
                messages[i] = dataclasses.replace(m, session_id=None, reason=reason)
            elif m.session_id in stored:
                messages[i] = dataclasses.replace(m, session_id=stored[m.session_id])
        for m in messages:
            if m.reason is not None:
                _dead_letter(ch, settings, m, m.reason)
                report.dead_lettered += 1

        ids = list(dict.fromkeys(m.session_id for m in messages if m.session_id is not None))
        known = registered(instance, ids)
        done = {k for k in known if k in cursor.pending}
        done |= already_requested(instance, known - done)
        candidates = [k for k in ids if k not in done]
        in_graph = graph.existing_sessions(candidates) if candidates else set()
        to_request = [k for k in candidates if k in in_graph]

        held: set[str] = set()
        waited: set[str] = set()
        for m in messages:
            sid = m.session_id
            if sid is None:
                continue
            if sid in done:
                ch.basic_ack(m.tag)
                report.acked_known += 1
                if sid in cursor.pending:
                    cursor.pending[sid][1] = True
            elif sid in in_graph:
                if sid in held:
                    ch.basic_ack(m.tag)  # another copy stays unacked until its request is stored
                    report.acked_duplicates += 1
                else:
                    held.add(sid)  # unacked: back in the queue when the connection closes
            elif sid in waited:
                ch.basic_ack(m.tag)  # the first copy was republished
                report.acked_duplicates += 1
            else:
                waited.add(sid)
                first = q.header_float(m.headers, q.FIRST_SEEN) or now
                attempts = int(q.header_float(m.headers, q.ATTEMPTS) or 0) + 1
                if now - first >= settings.announce_wait_seconds:
                    _dead_letter(
                        ch, settings, dataclasses.replace(m, headers={**m.headers, q.ATTEMPTS: attempts}),
                        f"session {sid} is not in the knowledge graph after {now - first:.0f} s and {attempts} attempt(s)",
                    )
                    report.dead_lettered += 1
                else:
                    q.publish(ch, settings.session_queue, m.body, {**m.headers, q.FIRST_SEEN: q.stamp(first), q.ATTEMPTS: attempts, q.TICK: token})
                    ch.basic_ack(m.tag)
                    report.republished += 1
        report.requested = to_request
        report.held += len(held)
    finally:
        try:
            connection.close()  # what is not acked goes back to the queue
        except Exception:
            pass

    for sid in to_request:
        cursor.pending[sid] = [now, False]
    _prune(instance, cursor, now)
    new_keys = [k for k in to_request if k not in known]
    result = dg.SensorResult(
        run_requests=[evaluation_request(to_request, asset_keys, QUEUE_SENSOR)] if to_request else [],
        dynamic_partitions_requests=[sessions_partitions.build_add_request(new_keys)] if new_keys else [],
        cursor=cursor.dump(),
        skip_reason=None if (to_request or messages) else "the queue is empty",
    )
    return report, result


def _prune(instance: dg.DagsterInstance, cursor: QueueCursor, now: float) -> None:
    """Forget pending sessions once their message is acked and Dagster shows their
    evaluation (from then on, their status stops repeats), or after a day."""
    acked = [k for k, (_, was_acked) in cursor.pending.items() if was_acked]
    shown = already_requested(instance, acked) if acked else set()
    for k in list(cursor.pending):
        at, was_acked = cursor.pending[k]
        if (was_acked and k in shown) or now - at > PENDING_TTL_SECONDS:
            del cursor.pending[k]


# -- the poll sensor -----------------------------------------------------------------

@dataclass
class PollCursor:
    mark: float = -1.0
    last: str = ""
    # When calls without a session node were last looked for (a scan of every call).
    orphans_checked: float = 0.0

    @classmethod
    def load(cls, raw: str | None) -> "PollCursor":
        if not raw:
            return cls()
        try:
            data = json.loads(raw)
            return cls(float(data["mark"]), str(data["last"]), float(data.get("orphans_checked", 0.0)))
        except (ValueError, TypeError, KeyError):
            return cls()

    def dump(self) -> str:
        return json.dumps({"mark": self.mark, "last": self.last, "orphans_checked": self.orphans_checked})


# How often the poll sensor looks for calls whose session node is missing.
ORPHANS_EVERY_S = 3600.0


def poll_tick(
    instance: dg.DagsterInstance, graph: KnowledgeGraph, settings: Settings, cursor: PollCursor, *, asset_keys: Sequence[dg.AssetKey]
) -> tuple[list[str], dg.SensorResult, str | None]:
    """One tick of `session_poll_sensor`: the next page of sessions by (ingestedAt,
    id) after the cursor; those with no partition (or registered but never requested)
    are registered and evaluated together. Sessions another producer wrote get their
    ingestedAt first. Returns, once an hour, a note naming calls without a session."""
    graph.stamp_unseen_sessions(settings.sensor_batch)
    note = None
    now = time.time()
    if now - cursor.orphans_checked >= ORPHANS_EVERY_S:
        orphans = graph.calls_without_session()
        note = describe_orphans(orphans) if orphans else None
        cursor = dataclasses.replace(cursor, orphans_checked=now)
    rows = graph.sessions_ingested_after(cursor.mark, cursor.last, settings.sensor_batch)
    ids = [sid for sid, _ in rows]
    known = registered(instance, ids)
    done = already_requested(instance, known)
    to_request = [k for k in ids if k not in done]
    if rows:
        cursor = dataclasses.replace(cursor, mark=rows[-1][1], last=rows[-1][0])
    new_keys = [k for k in to_request if k not in known]
    result = dg.SensorResult(
        run_requests=[evaluation_request(to_request, asset_keys, POLL_SENSOR)] if to_request else [],
        dynamic_partitions_requests=[sessions_partitions.build_add_request(new_keys)] if new_keys else [],
        cursor=cursor.dump(),
        skip_reason=None if to_request else f"no new session ({len(rows)} seen, all evaluated)",
    )
    return to_request, result, note


# -- the definitions -----------------------------------------------------------------


def build_sensors(asset_keys: Sequence[dg.AssetKey], settings: Settings) -> list[dg.SensorDefinition]:
    """Both sensors over the assets an evaluation's session runs materialize, ticking
    at the settings' interval; the poll sensor takes the settings' batch."""
    keys = list(asset_keys)
    selection = dg.AssetSelection.assets(*keys)

    @dg.sensor(
        name=QUEUE_SENSOR,
        asset_selection=selection,
        minimum_interval_seconds=settings.sensor_interval,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=(
            "Evaluates the sessions announced on the RabbitMQ queue (new_session_to_mce): each once, "
            "acknowledged only after its partition and evaluation are requested; malformed messages "
            "to the .dlq queue."
        ),
    )
    def session_queue_sensor(
        context: dg.SensorEvaluationContext, knowledge_graph: KnowledgeGraphResource, session_queue: SessionQueueResource
    ) -> dg.SensorResult:
        report, result = queue_tick(
            context.instance, knowledge_graph.open(), session_queue.settings(), QueueCursor.load(context.cursor), asset_keys=keys
        )
        context.log.info(report.summary())
        return result

    @dg.sensor(
        name=POLL_SENSOR,
        asset_selection=selection,
        minimum_interval_seconds=settings.sensor_interval,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description="Evaluates the sessions of the knowledge graph that have no partition yet, in ingestion order.",
    )
    def session_poll_sensor(context: dg.SensorEvaluationContext, knowledge_graph: KnowledgeGraphResource) -> dg.SensorResult:
        requested, result, note = poll_tick(
            context.instance, knowledge_graph.open(), settings, PollCursor.load(context.cursor), asset_keys=keys
        )
        if note:
            context.log.warning(note)
        if requested:
            context.log.info(f"{len(requested)} new session(s) requested")
        return result

    return [session_queue_sensor, session_poll_sensor]
