"""The Python API: evaluate sessions and read their results back in a few lines.

    with MCEClient() as client:
        client.compute_and_store([session_id])
        results = client.get_metrics(session_id, recursive=True)
        frame = client.results_frame(metrics=["Duration"], sessions=[session_id])
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import service
from .graph import KnowledgeGraph, open_graph

if TYPE_CHECKING:
    import pandas


class MCEClient:
    def __init__(self, knowledge_graph: KnowledgeGraph | None = None):
        self.kg = knowledge_graph or open_graph()

    def __enter__(self) -> "MCEClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release: the graph opened without an argument is the process's
        shared connection (`graph.open_graph`), and one that was given stays its owner's."""

    def get_metrics(
        self, session_id: str, metric_ids: Sequence[str] | None = None, recursive: bool = False
    ) -> list[dict[str, Any]]:
        """Results stored for the session: Session-scope ones, or with `recursive`
        those of every call in it too. `metric_ids` filters by name (`Duration`)
        or `provider.name`."""
        return service.results(session_id, metric_ids, recursive, kg=self.kg)

    def compute_and_store(self, session_ids: str | Sequence[str], metrics: Sequence[str] | None = None) -> bool:
        """Evaluate the enabled metrics (or `metrics` and what they depend on) on one
        session id or a list of them through the Dagster definitions and write the
        results; True when every run succeeded."""
        ids = [session_ids] if isinstance(session_ids, str) else list(session_ids)
        return service.compute(ids, metrics).success

    def list_sessions(
        self,
        app: str | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        evaluated: bool | None = None,
    ) -> list[dict[str, Any]]:
        """Sessions by start time: session_id, app, start_time and end_time (Unix
        seconds), results (how many are stored). `since`/`until`: ISO 8601 or a
        datetime on the start time, half-open; `evaluated`: only sessions holding
        results (True) or none (False)."""
        return service.list_sessions(app, since, until, evaluated, kg=self.kg)

    def results_frame(
        self,
        metrics: str | Iterable[str] | None = None,
        scopes: str | Iterable[str] | None = None,
        sessions: str | Iterable[str] | None = None,
        app: str | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
    ) -> "pandas.DataFrame":
        """Stored results as a DataFrame, one row per result, with the rows and
        columns `mce export` writes for the same filters (metadata as JSON text),
        in pandas' nullable dtypes. Filters as in `mce export`; every scope unless
        `scopes` or `metrics` narrows it."""
        return service.results_frame(metrics, scopes, sessions, app, since, until, kg=self.kg)
