"""The Python API: read results back, or evaluate a session, in a few lines.

    with MCEClient() as client:
        client.compute_and_store(session_id)
        results = client.get_metrics(session_id, recursive=True)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import service
from .graph import KnowledgeGraph, open_graph


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

    def compute_and_store(self, session_id: str, metrics: Sequence[str] | None = None) -> bool:
        """Evaluate the enabled metrics on one session through the Dagster
        definitions and write the results; True when the run succeeded."""
        return service.compute([session_id], metrics).success
