"""Resources configured from the environment."""


import os
import threading
from pathlib import Path

import dagster as dg

from ..graph.store import KnowledgeGraph, embedded_backend

_OPEN: dict[tuple[str, str, str], KnowledgeGraph] = {}
_LOCK = threading.Lock()


def default_mce_home() -> str:
    return str(Path(os.environ.get("MCE_HOME", ".mce")).resolve())


class KnowledgeGraphResource(dg.ConfigurableResource):
    """The knowledge graph the engine reads sessions from and writes results to.

    `embedded` (the default) is a FalkorDB server shared by every process of the
    deployment, its data under `mce_home` (default: $MCE_HOME, else ./.mce)."""

    backend: str = "embedded"
    mce_home: str = ""
    graph_name: str = "mce"

    def open(self) -> KnowledgeGraph:
        home = self.mce_home or default_mce_home()
        key = (self.backend, home, self.graph_name)
        with _LOCK:
            if key not in _OPEN:
                if self.backend != "embedded":
                    raise ValueError(f"unknown knowledge graph backend {self.backend!r} (known: embedded)")
                _OPEN[key] = KnowledgeGraph(embedded_backend(Path(home), self.graph_name))
            return _OPEN[key]


def knowledge_graph_from_env() -> KnowledgeGraphResource:
    # MCE_HOME is read when the graph is opened, in the process that opens it.
    return KnowledgeGraphResource(
        backend=os.environ.get("MCE_GRAPH_BACKEND", "embedded"),
        graph_name=os.environ.get("MCE_GRAPH_NAME", "mce"),
    )
