"""A step's asset materializations are stored together with its STEP_SUCCESS.

Dagster stores a step's materializations, then HANDLED_OUTPUT, then STEP_SUCCESS,
each as its own write. A run worker killed in between (a SIGKILL of the daemon and
its code server) leaves materializations of a step that never succeeded; the run
retry re-executes that step (a retry from failure goes by STEP_SUCCESS) and the
partitions get a second materialization. Held here, a step's materializations and
every event of that step after them are stored in one transaction with the step's
end (STEP_SUCCESS or STEP_FAILURE): a killed step leaves none of them.

The events reach storage in the order Dagster emits them; an event of any other
step or of the run stores what is held first.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from dagster._core.events import DagsterEventType
from dagster._core.events.log import EventLogEntry

StepKey = tuple[str, str]
_STEP_ENDS = frozenset({DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE})


def _step_of(event: EventLogEntry) -> StepKey | None:
    return (event.run_id, event.step_key) if event.step_key else None


def _is_materialization(event: EventLogEntry) -> bool:
    return event.dagster_event_type == DagsterEventType.ASSET_MATERIALIZATION


class HeldStepEvents:
    """Decides which events to store now: `route` returns groups, each to be stored in
    one transaction, in order."""

    def __init__(self) -> None:
        self._held: dict[StepKey, list[EventLogEntry]] = {}
        self._lock = threading.Lock()

    def route(self, events: Sequence[EventLogEntry]) -> list[list[EventLogEntry]]:
        """`events` come together (one event, or one batch of one step)."""
        step = _step_of(events[0])
        with self._lock:
            groups = [self._held.pop(k) for k in list(self._held) if k != step]
            holding = step is not None and (step in self._held or any(_is_materialization(e) for e in events))
            if not holding:
                return [*groups, list(events)]
            held = self._held.setdefault(step, [])
            held.extend(events)
            if any(e.dagster_event_type in _STEP_ENDS for e in events):
                groups.append(self._held.pop(step))
            return groups

    def drain(self) -> list[list[EventLogEntry]]:
        with self._lock:
            groups = list(self._held.values())
            self._held.clear()
            return groups
