"""Shared fixtures: a private embedded graph per test module, the same suite over
Neo4j where `make services` runs one, the real traces."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
REAL_TRACES = REPO.parent / "shared" / "data" / "real-traces"
IN_CI = os.environ.get("CI", "").lower() == "true"
# No test needs the network: the price table stays the committed copy (the refresh
# is tested against a local server), and no judge model is configured unless a
# test sets one.
os.environ.setdefault("MODEL_PRICES_REFRESH", "false")
os.environ.pop("LLM_MODEL_NAME", None)

# `eval "$(make -s services)"` exports NEO4J_URI, which would point every test at
# one shared Neo4j. Tests use the embedded graph unless they ask for Neo4j through
# `backend_kg` or `neo4j_env`, which put these variables back for their module.
_SELECTING = ("NEO4J_URI", "KG_DB_HOST")
NEO4J_ENV = {
    k: os.environ[k]
    for k in (*_SELECTING, "KG_DB_PORT", "NEO4J_USERNAME", "KG_DB_USER", "NEO4J_PASSWORD", "KG_DB_PASSWORD", "NEO4J_DATABASE", "KG_DB_NAME")
    if os.environ.get(k)
}
for _k in _SELECTING:
    os.environ.pop(_k, None)


def require(condition: bool, reason: str) -> None:
    """Skip with the reason outside CI; fail in CI, where everything must be there."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def real_traces() -> Path:
    require(REAL_TRACES.is_dir(), f"the real traces are not at {REAL_TRACES}")
    return REAL_TRACES


@pytest.fixture(scope="module")
def mce_home():
    # Short path: the server's Unix socket lives under it.
    home = Path(tempfile.mkdtemp(prefix="mce-test-"))
    previous = os.environ.get("MCE_HOME")
    os.environ["MCE_HOME"] = str(home)
    yield home
    from mce_dagster.graph.embedded import EmbeddedFalkorDB

    EmbeddedFalkorDB(home).stop()
    if previous is None:
        os.environ.pop("MCE_HOME", None)
    else:
        os.environ["MCE_HOME"] = previous
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def embedded_kg(mce_home):
    from mce_dagster.graph.store import KnowledgeGraph, embedded_backend

    graph = KnowledgeGraph(embedded_backend(mce_home))
    yield graph
    graph.close()


@pytest.fixture(scope="module")
def kg(embedded_kg):
    """The module's graph: embedded. Modules that run on both backends override it
    with `backend_kg`."""
    return embedded_kg


@contextlib.contextmanager
def _environment(values: dict[str, str]):
    previous = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in previous.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def neo4j_env(mce_home):
    """The Neo4j of `make services`, emptied, and selected for this module (the CLI,
    the Dagster definitions and the client then use it too)."""
    require(any(k in NEO4J_ENV for k in _SELECTING), "no Neo4j: NEO4J_URI is not set (run `eval \"$(make -s services)\"`)")
    with _environment(NEO4J_ENV):
        from mce_dagster.graph import open_graph

        graph = open_graph()
        # A page at a time: one transaction over a large graph exceeds Neo4j's memory limit.
        while graph.backend.query("MATCH (n) WITH n LIMIT 5000 DETACH DELETE n RETURN count(*) AS n")[0]["n"]:
            pass
        yield NEO4J_ENV


@pytest.fixture(scope="module", params=["embedded", "neo4j"])
def backend_kg(request, mce_home):
    """The module's graph on each backend in turn: one suite, both backends."""
    if request.param == "embedded":
        yield request.getfixturevalue("embedded_kg")
        return
    request.getfixturevalue("neo4j_env")
    from mce_dagster.graph import open_graph

    yield open_graph()
