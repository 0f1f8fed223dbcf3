"""`mce export` and `MCEClient.results_frame` against `mce kg metric get --json`, and
the Python API's example in the README, run as it is written."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pyarrow.csv
import pyarrow.parquet as pq
import pytest

from conftest import REPO
from mce_dagster.client import MCEClient
from mce_dagster.results import RESULT_FIELDS, ResultSelection, arrow_schema
from mce_dagster.synthetic import write_export
from test_cli import mce

COLUMNS = [public for public, _ in RESULT_FIELDS]
EXAMPLE = REPO / "examples" / "python_api.py"


@pytest.fixture(scope="module")
def sessions(mce_home, tmp_path_factory):
    """14 synthetic sessions, 12 of them evaluated on Duration and ToolErrorRate (at
    every scope, with ToolError beneath): (evaluated ids, the others)."""
    export = tmp_path_factory.mktemp("export") / "sessions.json"
    write_export(export, 14, seed=11)
    mce(mce_home, "ingest", str(export))
    ids = [s["session_id"] for s in MCEClient().list_sessions()]
    mce(mce_home, "compute", *ids[:12], "--metrics", "Duration,ToolErrorRate")
    return ids[:12], ids[12:]


@pytest.fixture(scope="module")
def stored(mce_home, sessions):
    """What `mce kg metric get --recursive --json` prints for each evaluated session."""
    rows = []
    for session_id in sessions[0]:
        rows += json.loads(mce(mce_home, "kg", "metric", "get", session_id, "--recursive", "--json").stdout)
    return rows


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return tmp_path_factory.mktemp("out")


def export(home, path, *args, check=True, env=None):
    return mce(home, "export", "--output", str(path), *args, check=check, env=env)


def read_parquet(path):
    table = pq.read_table(path)
    assert table.schema.names == COLUMNS
    return by_id(decoded(table.to_pylist()))


def decoded(rows):
    """Table rows with metadata back from its JSON text, as `kg metric get --json` shows it."""
    return [{**r, "metadata": None if r["metadata"] is None else json.loads(r["metadata"])} for r in rows]


def by_id(rows):
    return sorted(rows, key=lambda r: r["id"])


def assert_same(got, expected):
    """Row for row, key for key, the same values of the same types."""
    assert len(got) == len(expected)
    for a, b in zip(by_id(got), by_id(expected)):
        assert list(a) == list(b)
        assert a == b
        assert {k: type(v) for k, v in a.items()} == {k: type(v) for k, v in b.items()}, a["id"]


def test_parquet_rows_equal_kg_metric_get(mce_home, sessions, stored, out):
    path = out / "all.parquet"
    done = export(mce_home, path, "--format", "parquet")
    assert f"exported {len(stored)} results of {len(sessions[0])} session(s)" in done.stdout
    assert list(stored[0]) == COLUMNS
    assert {r["scope"] for r in stored} == {"Session", "MASCall", "AgentCall", "TaskCall", "LLMCall", "ToolCall"}
    assert any(isinstance(r["metadata"], dict) for r in stored) and any(r["numerator"] is not None for r in stored)
    assert_same(read_parquet(path), stored)
    assert pq.read_table(path).schema == arrow_schema()


def test_session_scope_equals_kg_metric_get_without_recursive(mce_home, sessions, out):
    chosen = sessions[0][:3]
    path = out / "session.parquet"
    export(mce_home, path, "--scope", "Session", *(f"--session={s}" for s in chosen))
    expected = []
    for session_id in chosen:
        expected += json.loads(mce(mce_home, "kg", "metric", "get", session_id, "--json").stdout)
    assert_same(read_parquet(path), expected)


def test_csv_holds_the_same_rows(mce_home, stored, out):
    path = out / "all.csv"
    export(mce_home, path, "--format", "csv")
    options = pyarrow.csv.ConvertOptions(column_types=arrow_schema(), strings_can_be_null=True, quoted_strings_can_be_null=False)
    table = pyarrow.csv.read_csv(path, convert_options=options)
    assert table.schema.names == COLUMNS
    assert_same(decoded(table.to_pylist()), stored)
    assert len(pd.read_csv(path)) == len(stored)


def test_filters_narrow_to_what_they_name(mce_home, sessions, stored, out):
    listed = {s["session_id"]: s for s in MCEClient().list_sessions(evaluated=True)}
    assert sorted(listed) == sorted(sessions[0])
    app = listed[sessions[0][0]]["app"]
    starts = sorted(s["start_time"] for s in listed.values())
    # Between two sessions' starts, so rounding never moves a session across.
    since = datetime.fromtimestamp((starts[2] + starts[3]) / 2, timezone.utc).isoformat()
    until = datetime.fromtimestamp((starts[8] + starts[9]) / 2, timezone.utc).isoformat()
    start = {sid: s["start_time"] for sid, s in listed.items()}
    a, b, c = sessions[0][:3]
    cases = [
        (["--metric", "Duration"], lambda r: r["metric"] == "Duration"),
        (["--metric", "Session/Duration,native.ToolErrorRate"],
         lambda r: (r["scope"], r["metric"]) == ("Session", "Duration") or r["metric"] == "ToolErrorRate"),
        (["--metric", "ToolErrorRate", "--scope", "AgentCall"], lambda r: (r["scope"], r["metric"]) == ("AgentCall", "ToolErrorRate")),
        (["--scope", "Session", "--scope", "LLMCall"], lambda r: r["scope"] in ("Session", "LLMCall")),
        (["--metric", "Duration", "--scope", "Session,ToolCall"], lambda r: r["metric"] == "Duration" and r["scope"] in ("Session", "ToolCall")),
        (["--session", a, "--session", f"{b},{c}"], lambda r: r["session_id"] in (a, b, c)),
        (["--app", app], lambda r: listed[r["session_id"]]["app"] == app),
        (["--since", since], lambda r: start[r["session_id"]] >= starts[3]),
        (["--since", since, "--until", until, "--scope", "Session"],
         lambda r: starts[3] <= start[r["session_id"]] <= starts[8] and r["scope"] == "Session"),
    ]
    for i, (args, keep) in enumerate(cases):
        expected = [r for r in stored if keep(r)]
        assert 0 < len(expected) < len(stored), args
        path = out / f"filtered-{i}.parquet"
        export(mce_home, path, *args)
        assert_same(read_parquet(path), expected)


def test_nothing_matching_writes_the_columns_and_exits_1(mce_home, sessions, out):
    for i, args in enumerate((["--app", "no-such-app"], ["--session", sessions[1][0]], ["--since", "2999-01-01"])):
        path = out / f"empty-{i}.parquet"
        done = export(mce_home, path, *args, check=False)
        assert done.returncode == 1, done.stderr
        assert "no results match the filters" in done.stderr
        table = pq.read_table(path)
        assert table.num_rows == 0 and table.schema == arrow_schema()
    csv = out / "empty.csv"
    assert export(mce_home, csv, "--format", "csv", "--app", "no-such-app", check=False).returncode == 1
    assert csv.read_text().strip().split(",") == [f'"{c}"' for c in COLUMNS]


def test_bad_input_is_one_line_and_exit_2(mce_home, sessions, out):
    path = out / "never.parquet"
    for args, says in (
        (["--metric", "Duration,Nope"], "no metric named 'Nope'"),
        (["--metric", "Session/Cots"], "no metric named 'Cots'"),
        (["--metric", "ToolErrorRate", "--scope", "LLMCall"], "ToolErrorRate is not defined at LLMCall"),
        (["--scope", "Nowhere"], "unknown scope 'Nowhere'"),
        (["--since", "soon"], "since 'soon' is not an ISO 8601"),
        (["--since", "2025-02-01", "--until", "2025-01-01"], "must be before until"),
    ):
        done = export(mce_home, path, *args, check=False)
        assert done.returncode == 2, (args, done.stderr)
        assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
        assert not path.exists()
    done = export(mce_home, path, "--session", "never-ingested", check=False)
    assert done.returncode == 1 and "not in the knowledge graph: never-ingested" in done.stderr, done.stderr
    assert not path.exists()
    done = export(mce_home, out / "no-such-dir" / "x.parquet", check=False)
    assert done.returncode == 2 and "does not exist" in done.stderr
    done = export(mce_home, out, check=False)
    assert done.returncode == 2 and "it is a directory" in done.stderr


def test_batches_bound_what_is_read_not_what_is_written(mce_home, sessions, out):
    """One session per batch: a row group each, and the same file."""
    whole, batched = out / "whole.parquet", out / "batched.parquet"
    export(mce_home, whole)
    export(mce_home, batched, "--batch-rows", "1")
    assert pq.ParquetFile(batched).num_row_groups == len(sessions[0])
    assert pq.read_table(batched).equals(pq.read_table(whole))
    selection = ResultSelection(sessions=(("a", 5), ("b", 5), ("c", 20), ("d", 1), ("e", 9)))
    assert list(selection.batches(10)) == [["a", "b"], ["c"], ["d", "e"]]
    assert list(selection.batches(1)) == [["a"], ["b"], ["c"], ["d"], ["e"]]


def test_two_exports_to_one_file_at_once_each_write_it_whole(mce_home, sessions, out):
    from test_files import at_once

    from mce_dagster.service import export_results, select_results

    whole = out / "alone.parquet"
    export(mce_home, whole)
    path = out / "twice.parquet"
    outcomes = at_once(lambda: export_results(select_results(), path, batch_rows=1), n=3)
    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    assert pq.read_table(path).equals(pq.read_table(whole))
    assert not list(out.glob(".twice.parquet*")), "a partial file was left behind"


def test_progress_bar_on_a_terminal(mce_home, sessions, out):
    done = export(mce_home, out / "progress.parquet", "--batch-rows", "50", env={"TTY_COMPATIBLE": "1"})
    assert "exporting sessions" in done.stderr
    assert "exporting sessions" not in export(mce_home, out / "quiet.parquet").stderr


def test_results_frame_equals_the_parquet_file(mce_home, sessions, out):
    path = out / "frame.parquet"
    export(mce_home, path)
    with MCEClient() as client:
        frame = client.results_frame()
        pd.testing.assert_frame_equal(frame, pd.read_parquet(path, dtype_backend="numpy_nullable"))
        assert list(frame.columns) == COLUMNS and str(frame["metric_version"].dtype) == "Int64"
        narrowed = out / "frame-narrowed.parquet"
        export(mce_home, narrowed, "--metric", "Duration", "--scope", "Session", "--session", sessions[0][0])
        pd.testing.assert_frame_equal(
            client.results_frame(metrics="Duration", scopes=["Session"], sessions=[sessions[0][0]]),
            pd.read_parquet(narrowed, dtype_backend="numpy_nullable"),
        )
        empty = client.results_frame(app="no-such-app")
        assert empty.empty and list(empty.columns) == COLUMNS


def test_list_sessions_filters(sessions):
    with MCEClient() as client:
        everything = client.list_sessions()
        order = [(s["start_time"], s["session_id"]) for s in everything]
        assert order == sorted(order) and len(order) == 14
        assert {s["session_id"] for s in client.list_sessions(evaluated=True)} == set(sessions[0])
        assert {s["session_id"] for s in client.list_sessions(evaluated=False)} == set(sessions[1])
        assert all(s["results"] == 0 for s in client.list_sessions(evaluated=False))
        app = everything[0]["app"]
        assert {s["app"] for s in client.list_sessions(app=app)} == {app}
        middle = everything[7]["start_time"]
        later = client.list_sessions(since=datetime.fromtimestamp(middle, timezone.utc))
        assert later and all(s["start_time"] >= middle - 1e-5 for s in later) and len(later) < len(everything)


# -- the README's example -------------------------------------------------------------


def readme_example(readme: str) -> str | None:
    """The Python block under the README's "The Python API" heading."""
    found = re.search(r"^### The Python API\n.*?^```python\n(.*?)^```", readme, re.S | re.M)
    return found.group(1) if found else None


def test_readme_carries_the_example_as_it_is_run():
    assert readme_example("### The Python API\n\nsome text\n\n```python\nx = 1\n```\n") == "x = 1\n"
    assert readme_example((REPO / "README.md").read_text()) == EXAMPLE.read_text()


def test_the_example_runs(tmp_path, monkeypatch):
    home = Path(tempfile.mkdtemp(prefix="mce-ex-"))
    env = {**os.environ, "MCE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}
    try:
        write_export(tmp_path / "s.json", 4, seed=3)
        mce(home, "ingest", str(tmp_path / "s.json"))
        done = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "Duration results (the session's and its calls')" in done.stdout
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        with MCEClient() as client:
            evaluated = client.list_sessions(evaluated=True)
            assert len(evaluated) == 3
            assert all(s["session_id"][:8] in done.stdout for s in evaluated)
            [last] = client.list_sessions(evaluated=False)
            # One id, not in a list, still works.
            assert client.compute_and_store(last["session_id"], metrics=["Session/Duration"])
            [result] = client.get_metrics(last["session_id"])
            assert (result["scope"], result["metric"]) == ("Session", "Duration")
    finally:
        from mce_dagster.graph.embedded import EmbeddedFalkorDB

        EmbeddedFalkorDB(home).stop()
        shutil.rmtree(home, ignore_errors=True)
