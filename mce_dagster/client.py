"""The Python API: read results back, or evaluate a session, in a few lines.

    with MCEClient() as client:
        client.compute_and_store(session_id)
        results = client.get_metrics(session_id, recursive=True)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .core.ontology import Scope
from .graph.store import KnowledgeGraph
from .results import to_public


class MCEClient:
    def __init__(self, knowledge_graph: KnowledgeGraph | None = None):
        self._owned = knowledge_graph is None
        if knowledge_graph is None:
            from pathlib import Path

            from .defs.resources import default_mce_home
            from .graph.store import embedded_backend

            knowledge_graph = KnowledgeGraph(embedded_backend(Path(default_mce_home())))
        self.kg = knowledge_graph

    def __enter__(self) -> "MCEClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection this client opened (not one it was given)."""
        if self._owned:
            self.kg.close()

    def get_metrics(
        self, session_id: str, metric_ids: Sequence[str] | None = None, recursive: bool = False
    ) -> list[dict[str, Any]]:
        """Results stored for the session: Session-scope ones, or with `recursive`
        those of every call in it too. `metric_ids` filters by name (`Duration`)
        or `provider.name`."""
        rows = [to_public(p) for p in self.kg.read_results([session_id])]
        if not recursive:
            rows = [r for r in rows if r["scope"] == Scope.SESSION.value]
        if metric_ids:
            wanted = set(metric_ids)
            rows = [r for r in rows if r["metric"] in wanted or f"{r['provider']}.{r['metric']}" in wanted]
        return rows

    def compute_and_store(self, session_id: str, metrics: Sequence[str] | None = None) -> bool:
        """Evaluate the enabled metrics on one session through the Dagster
        definitions and write the results; True when the run succeeded."""
        from .runner import compute_sessions

        return compute_sessions([session_id], metrics).success
