"""What `mce` says when there is nothing to work on: a session id the graph does not
hold is an error in every output form of every command that takes one, and `mce kg
check` on a graph with nothing to check says so instead of reporting OK."""

from __future__ import annotations

import json

import pytest

from test_cli import mce

UNKNOWN = "never-ingested-7f3a"


@pytest.fixture(scope="module")
def one_session(mce_home, tmp_path_factory):
    """A graph holding one session, so that an unknown id is not just an empty graph."""
    path = tmp_path_factory.mktemp("synth") / "one.json"
    mce(mce_home, "synth", str(path), "--sessions", "1", "--seed", "3")
    ingested = json.loads(mce(mce_home, "ingest", str(path), "--json").stdout)
    return ingested["sessions"][0]


def test_kg_check_on_an_empty_graph_says_there_is_nothing_to_check(mce_home):
    # Runs first in this module: the module's graph is still empty.
    done = mce(mce_home, "kg", "check", check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "OK" not in done.stdout and "nothing to check" in done.stderr and "mce ingest" in done.stderr
    as_json = mce(mce_home, "kg", "check", "--json", check=False)
    report = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and report["ok"] is False and report["empty"] is True and report["checked"] == 0


def test_kg_check_passes_once_the_graph_holds_a_session(mce_home, one_session):
    done = mce(mce_home, "kg", "check")
    assert "\nOK " in "\n" + done.stdout and "nothing to check" not in done.stderr
    report = json.loads(mce(mce_home, "kg", "check", "--json").stdout)
    assert report["ok"] is True and report["empty"] is False and report["checked"] > 0


@pytest.mark.parametrize(
    "args, code",
    [
        (("kg", "metric", "get", UNKNOWN), 1),
        (("kg", "metric", "get", UNKNOWN, "--json"), 1),
        (("kg", "metric", "get", UNKNOWN, "--recursive"), 1),
        (("kg", "metric", "get", UNKNOWN, "--recursive", "--json"), 1),
        # Every command answers an unknown session with 1 (other bad input is 2).
        (("compute", UNKNOWN, "--metrics", "Duration"), 1),
        (("compute", UNKNOWN, "--metrics", "Duration", "--json"), 1),
        (("export", "--output", "{out}", "--session", UNKNOWN), 1),
        (("export", "--output", "{out}", "--session", UNKNOWN, "--json"), 1),
        (("export", "--output", "{out}", "--format", "csv", "--session", UNKNOWN, "--json"), 1),
    ],
)
def test_an_unknown_session_is_an_error_in_every_output_form(mce_home, one_session, tmp_path, args, code):
    out = tmp_path / "results.out"
    done = mce(mce_home, *(a.format(out=out) for a in args), check=False)
    assert done.returncode == code, (args, done.returncode, done.stdout, done.stderr)
    # Nothing on standard output (no `[]`, no empty table); one line on stderr naming the id.
    assert done.stdout == "", (args, done.stdout)
    assert UNKNOWN in done.stderr and "not in the knowledge graph" in done.stderr, (args, done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not out.exists()


def test_the_known_session_beside_it_reads_back(mce_home, one_session):
    # The same commands answer for the session the graph holds.
    mce(mce_home, "compute", one_session, "--metrics", "Duration")
    rows = json.loads(mce(mce_home, "kg", "metric", "get", one_session, "--json").stdout)
    assert [r["metric"] for r in rows] == ["Duration"] and rows[0]["session_id"] == one_session
