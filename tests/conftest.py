"""Shared fixtures: a private embedded graph per test module, the real traces."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
REAL_TRACES = REPO.parent / "shared" / "data" / "real-traces"
IN_CI = os.environ.get("CI", "").lower() == "true"


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
def kg(mce_home):
    from mce_dagster.graph.store import KnowledgeGraph, embedded_backend

    graph = KnowledgeGraph(embedded_backend(mce_home))
    yield graph
    graph.close()
