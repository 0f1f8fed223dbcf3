"""The knowledge graph: `KnowledgeGraph` over one backend, opened from the settings.

Interfaces (the CLI, the Python API) and the Dagster resources open the graph here
and never build a backend themselves, so every caller of one process shares one
connection and every process of a deployment reaches the same store. The resources
pass their own `GraphSettings`; an interface that passes none gets the process's
settings.
"""

from __future__ import annotations

import logging
import threading

from ..errors import ConfigurationError, MCEError, ServiceError
from ..settings import GraphSettings, Settings, masked_url, redact
from .store import GraphBackend, KnowledgeGraph, describe_orphans

log = logging.getLogger(__name__)

_OPEN: dict[tuple[str, ...], KnowledgeGraph] = {}
_LOCK = threading.Lock()


def _graph(settings: Settings | GraphSettings | None) -> GraphSettings:
    if settings is None:
        settings = Settings.from_env()
    return settings.graph if isinstance(settings, Settings) else settings


def _key(settings: GraphSettings) -> tuple[str, ...]:
    if settings.graph_backend == "neo4j":
        return ("neo4j", settings.neo4j_uri or "", settings.neo4j_user, settings.neo4j_database or "")
    return ("embedded", str(settings.mce_home), settings.graph_name)


def _open_backend(settings: GraphSettings) -> GraphBackend:
    if settings.graph_backend == "neo4j":
        from .neo4j import Neo4jBackend

        try:
            return Neo4jBackend(
                settings.neo4j_uri or "",
                settings.neo4j_user,
                settings.neo4j_password,
                settings.neo4j_database,
                retry_time_s=settings.neo4j_retry_seconds,
            )
        except MCEError:
            raise
        except Exception as exc:
            # Whatever else the driver raises while connecting: its message and traceback
            # may quote the URI with its password, so neither goes further.
            raise ServiceError(
                f"Neo4j at {masked_url(settings.neo4j_uri or '')} could not be opened: {type(exc).__name__}: {redact(str(exc), also=(settings.neo4j_uri or '', settings.neo4j_password))}"
            ) from None
    from .store import embedded_backend

    return embedded_backend(settings.mce_home, settings.graph_name)


def open_graph(settings: Settings | GraphSettings | None = None) -> KnowledgeGraph:
    """The graph the settings point at, shared by every caller in this process."""
    settings = _graph(settings)
    key = _key(settings)
    with _LOCK:
        if key not in _OPEN:
            _OPEN[key] = KnowledgeGraph(_open_backend(settings))
            if log.isEnabledFor(logging.INFO):
                log.info("knowledge graph: %s", describe(settings))
        return _OPEN[key]


def describe(settings: Settings | GraphSettings | None = None) -> str:
    """Where the graph is, for a person: backend and address."""
    from .embedded import EmbeddedFalkorDB

    settings = _graph(settings)
    if settings.graph_backend == "neo4j":
        return f"Neo4j at {masked_url(settings.neo4j_uri or '')} as {settings.neo4j_user}, database {settings.neo4j_database or '(default)'}"
    server = EmbeddedFalkorDB(settings.mce_home)
    return f"embedded FalkorDB at {server.socket_path} (pid {server.pid()}), graph {settings.graph_name!r}"


def stop_embedded_server(settings: Settings | GraphSettings | None = None) -> bool:
    """Stop the embedded server (its data stays under MCE_HOME); False when none ran."""
    from .embedded import EmbeddedFalkorDB

    settings = _graph(settings)
    if settings.graph_backend == "neo4j":
        raise ConfigurationError("the graph is Neo4j (NEO4J_URI is set): mce does not stop a server it did not start")
    with _LOCK:
        for key in [k for k in _OPEN if k[1] == str(settings.mce_home)]:
            _OPEN.pop(key).close()
    return EmbeddedFalkorDB(settings.mce_home).stop()


__all__ = ["GraphBackend", "KnowledgeGraph", "describe", "describe_orphans", "open_graph", "stop_embedded_server"]
