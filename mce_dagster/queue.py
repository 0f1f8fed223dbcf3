"""The session queue: RabbitMQ's `new_session_to_mce` and its dead-letter queue.

The ingestion pipeline announces each new session with a JSON object carrying its
`session_id`. This module connects from the settings (the sensor's resource passes
its own `QueueSettings`; a caller that passes none gets the process's), declares both queues
(durable), reads a message's session id (or says why it cannot), and publishes with
publisher confirms: `publish` returns only once the broker has the message, so a
caller may acknowledge the original after it. Imports no Dagster: `mce announce`,
tests and benches use it too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from .errors import ConfigurationError, InputError, ServiceError
from .settings import QueueSettings, Settings, masked_url, redact

if TYPE_CHECKING:
    import pika
    from pika.adapters.blocking_connection import BlockingChannel

QUEUE = "new_session_to_mce"
DLQ_SUFFIX = ".dlq"

# Headers the engine sets; the rest of a message's headers are kept as they came.
REASON = "x-mce-reason"  # why a message was dead-lettered
SOURCE = "x-mce-source-queue"  # the queue it was taken from
ATTEMPTS = "x-mce-attempts"  # how many times the sensor found the session missing from the graph
FIRST_SEEN = "x-mce-first-seen"  # when the sensor first saw it (Unix seconds)
TICK = "x-mce-tick"  # the sensor tick that republished it (seen again in that tick: the queue has wrapped)

#: what Dagster refuses in a partition key
_INVALID_KEY_PARTS = ("...", "\a", "\b", "\f", "\n", "\r", "\t", "\v", "\0")
_MAX_KEY_LENGTH = 512


def dlq_name(queue: str) -> str:
    return queue + DLQ_SUFFIX


def _queue(settings: Settings | QueueSettings | None) -> QueueSettings:
    if settings is None:
        settings = Settings.from_env()
    return settings.queue if isinstance(settings, Settings) else settings


def describe(settings: Settings | QueueSettings | None = None) -> str:
    """The broker and queue for a person, without the password."""
    settings = _queue(settings)
    params = _parameters(settings)
    return f"RabbitMQ at {params.host}:{params.port} vhost {params.virtual_host!r}, queue {settings.session_queue!r}"


def _parameters(settings: QueueSettings) -> "pika.URLParameters":
    """The broker's connection parameters; a URL pika cannot read is a
    `ConfigurationError` that shows it masked (pika's own message may quote it)."""
    import pika

    try:
        return pika.URLParameters(settings.rabbitmq_url)
    except Exception as exc:  # ValueError, and pika's own for a bad option in the query
        said = redact(str(exc), also=(settings.rabbitmq_url,))
        raise ConfigurationError(f"RABBITMQ_URL {masked_url(settings.rabbitmq_url)} is not an AMQP URL: {type(exc).__name__}: {said}") from None


def connect(settings: Settings | QueueSettings | None = None, *, timeout: float = 10.0) -> "pika.BlockingConnection":
    """A blocking connection to the broker the settings name. A broker that does not
    answer is a `ServiceError` that names it (never the password)."""
    import pika

    settings = _queue(settings)
    params = _parameters(settings)
    params.socket_timeout = timeout
    params.blocked_connection_timeout = timeout
    params.connection_attempts = 1
    # The sensor holds a connection for a tick only; a heartbeat that outlives the
    # tick budget keeps the broker from dropping a slow tick.
    params.heartbeat = 120
    try:
        return pika.BlockingConnection(params)
    except Exception as exc:  # AMQPConnectionError and its many subclasses, socket errors
        said = redact(str(exc), also=(settings.rabbitmq_url,))
        raise ServiceError(f"the session queue is unreachable ({describe(settings)}): {type(exc).__name__} {said}".rstrip()) from None


def declare(channel: "BlockingChannel", queue: str) -> None:
    """Both queues, durable; declaring is idempotent."""
    channel.queue_declare(queue=queue, durable=True)
    channel.queue_declare(queue=dlq_name(queue), durable=True)


@contextmanager
def channel(settings: Settings | QueueSettings | None = None) -> Iterator["BlockingChannel"]:
    """A channel with publisher confirms on, both queues declared; closed after."""
    settings = _queue(settings)
    connection = connect(settings)
    try:
        ch = connection.channel()
        ch.confirm_delivery()
        declare(ch, settings.session_queue)
        yield ch
    finally:
        try:
            connection.close()
        except Exception:  # a dropped connection: its unacked messages are requeued anyway
            pass


def publish(ch: "BlockingChannel", queue: str, body: bytes, headers: Mapping[str, Any] | None = None) -> None:
    """Publish persistently to `queue` and wait for the broker's confirm (the channel
    must be in confirm mode, as `channel()` makes it). Raises when the broker refuses."""
    import pika

    ch.basic_publish(
        exchange="",
        routing_key=queue,
        body=body,
        properties=pika.BasicProperties(delivery_mode=2, content_type="application/json", headers=dict(headers or {})),
        mandatory=True,
    )


def announcement(session_id: str) -> bytes:
    return json.dumps({"session_id": session_id}).encode()


def announce(session_ids: Iterable[str], settings: Settings | QueueSettings | None = None) -> int:
    """Announce sessions the way the ingestion pipeline does; the number published."""
    settings = _queue(settings)
    n = 0
    with channel(settings) as ch:
        for session_id in session_ids:
            publish(ch, settings.session_queue, announcement(session_id))
            n += 1
    return n


@dataclass(frozen=True)
class Announcement:
    session_id: str


def parse(body: bytes) -> Announcement:
    """The session a message announces; `InputError` with the reason when the
    message is malformed (the reason goes into the dead letter's headers)."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"not a JSON object but {type(data).__name__}")
    session_id = data.get("session_id")
    if "session_id" not in data:
        raise InputError("no session_id")
    if not isinstance(session_id, str):
        raise InputError(f"session_id is not a string but {type(session_id).__name__}")
    if not session_id.strip():
        raise InputError("session_id is empty")
    if len(session_id) > _MAX_KEY_LENGTH:
        raise InputError(f"session_id is longer than {_MAX_KEY_LENGTH} characters")
    bad = [part for part in _INVALID_KEY_PARTS if part in session_id]
    if bad:
        raise InputError(f"session_id contains {bad[0]!r}, which a Dagster partition key may not")
    return Announcement(session_id)


def header_float(headers: Mapping[str, Any] | None, name: str) -> float | None:
    value = (headers or {}).get(name)
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def stamp(t: float) -> str:
    """A time for a header: AMQP tables carry no floats, so seconds as text."""
    return f"{t:.3f}"


def now() -> float:
    return time.time()
