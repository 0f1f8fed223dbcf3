"""A run step that finds the graph unavailable waits and runs again, a few times
(the graph resource's `retries` and `retry_wait_seconds`: MCE_GRAPH_RETRIES,
MCE_GRAPH_RETRY_WAIT_SECONDS), then fails with the reason as its message; the run
then fails and the daemon's run retries (dagster.yaml) launch it again from that step.

A step's graph writes are one transaction per asset and batch, so a step that
failed left nothing of its batch behind, and a retried step writes it whole. Only
`GraphUnavailableError` is retried: a bug or a missing session fails at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dagster as dg

from ..errors import GraphUnavailableError


def attempt_of(context: Any) -> int:
    """How many times this step ran before (0 outside a run)."""
    if isinstance(context, (dg.AssetExecutionContext, dg.OpExecutionContext)):
        return context.retry_number
    try:
        return context.step_context.previous_attempt_count
    except Exception:  # an IO context built by hand, outside a run
        return 0


@contextmanager
def retried_while_graph_unavailable(context: Any, retries: int, wait_seconds: float) -> Iterator[None]:
    try:
        yield
    except GraphUnavailableError as exc:
        if attempt_of(context) < retries:
            raise dg.RetryRequested(max_retries=retries, seconds_to_wait=wait_seconds) from exc
        # The step's failure message is the reason itself, not "Exceeded max_retries".
        raise dg.Failure(description=str(exc), allow_retries=False) from exc
