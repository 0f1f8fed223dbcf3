"""The project's errors: one base, so interfaces can tell a user's mistake from a bug.

The CLI turns an `MCEError` (and only that) into a one-line message and exit code
2; anything else is a bug and keeps its traceback. Imports nothing of the project,
so every layer, the pure core included, may raise these.
"""

from __future__ import annotations

#: the most of a caller's text an error message quotes back
SHOWN_CHARACTERS = 64


def shown(text: object, limit: int = SHOWN_CHARACTERS, quoted: bool = True) -> str:
    """A caller's value as an error message may quote it: its first `limit`
    characters, as a Python literal (so quotes, line breaks, control characters and
    lone surrogates come out escaped), and how long it was when it was longer. A
    reply never grows with what was sent. `quoted=False` leaves a printable value
    bare, as an id in a list reads."""
    text = str(text)
    prefix = text[:limit]
    literal = prefix if not quoted and prefix.isprintable() and "'" not in prefix else repr(prefix)
    return literal if len(text) <= limit else f"{literal}... ({len(text)} characters)"


class MCEError(Exception):
    """Something the user can fix: bad input, bad configuration, a missing service."""


class ConfigurationError(MCEError):
    """Settings, `mce_config.yaml` or the metric catalog are wrong."""


class InputError(MCEError):
    """Data handed to the engine cannot be used as it is (a trace, a session id)."""


class ServiceError(MCEError):
    """A service the engine needs (the graph server, Dagster's storage) is unavailable."""


class GraphUnavailableError(ServiceError):
    """The graph server did not answer (down, connection dropped) or kept refusing a
    transaction as transient; trying again later may succeed."""


class UnknownSessionError(InputError):
    """Sessions asked for that the knowledge graph does not hold."""

    def __init__(self, session_ids: list[str], orphan_calls: dict[str, int] | None = None):
        self.session_ids = list(session_ids)
        # Of those, the ones the graph holds calls of but no Session node for.
        self.orphan_calls = dict(orphan_calls or {})
        listed = ", ".join(shown(s, quoted=False) for s in self.session_ids[:10]) + (" ..." if len(self.session_ids) > 10 else "")
        message = f"{len(self.session_ids)} session(s) are not in the knowledge graph: {listed}"
        if self.orphan_calls:
            held = ", ".join(f"{n} of {shown(s, quoted=False)}" for s, n in sorted(self.orphan_calls.items())[:10])
            message += f" (the graph holds calls but no Session node for some, as for a trace with no agent span: {held})"
        super().__init__(message)


class AmbiguousSessionError(InputError):
    """A raw session id (`<app>_<uuid>`) that more than one stored session answers to."""

    def __init__(self, session_id: str, candidates: list[str]):
        self.session_id = session_id
        self.candidates = sorted(candidates)
        super().__init__(f"session id {shown(session_id)} is ambiguous: the graph holds {', '.join(self.candidates[:10])}")


class UnknownMetricError(ConfigurationError, KeyError):
    """A metric name (or scope) that the catalog does not define."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class RequestTooLargeError(InputError):
    """A request asks for more work than one request may (sessions, runs): the
    message names the cap and the setting that holds it."""


class QueueFullError(ServiceError):
    """The instance's run queue holds as many waiting runs as it may take: a request
    may be made again once some have been launched (`retry_after_s`)."""

    def __init__(self, message: str, retry_after_s: int = 30):
        super().__init__(message)
        self.retry_after_s = retry_after_s
