"""What every `mce` command shares: --json on each command that prints data, progress
bars on standard error (stdout stays parseable), -v/-vv, --env-file."""

from __future__ import annotations

import json

import pytest

from test_cli import mce

# Commands that print no data: a server, and the guided tour.
WITHOUT_JSON = {"serve", "demo"}
# Past the number of sessions below which no progress bar is drawn.
SESSIONS = 14


def commands():
    import typer.main

    from mce_dagster.cli import app

    def walk(command, prefix=()):
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                yield from walk(sub, (*prefix, name))
        else:
            yield " ".join(prefix), {opt for p in command.params for opt in p.opts}

    return dict(walk(typer.main.get_command(app)))


def test_every_command_that_prints_data_has_json():
    found = commands()
    assert {"ingest", "compute", "export", "report", "kg metric get"} <= set(found)  # the walk sees nested groups
    missing = sorted(name for name, opts in found.items() if "--json" not in opts and name not in WITHOUT_JSON)
    assert not missing, f"no --json: {missing}"


@pytest.fixture(scope="module")
def export_file(mce_home, tmp_path_factory):
    path = tmp_path_factory.mktemp("synth") / "sessions.json"
    written = json.loads(mce(mce_home, "synth", str(path), "--sessions", str(SESSIONS), "--seed", "5", "--json").stdout)
    assert written["sessions"] == SESSIONS
    return path


def test_json_stays_clean_while_progress_bars_draw(mce_home, export_file, tmp_path):
    # TTY_COMPATIBLE=1: Rich treats standard error as a terminal and draws its bars.
    bars = {"TTY_COMPATIBLE": "1"}
    ingested = mce(mce_home, "ingest", str(export_file), "--json", env=bars)
    assert len(json.loads(ingested.stdout)["sessions"]) == SESSIONS
    assert "ingesting sessions" in ingested.stderr
    computed = mce(mce_home, "compute", "--all", "--metrics", "Duration", "--json", env=bars)
    outcome = json.loads(computed.stdout)
    assert outcome["sessions"] == SESSIONS and outcome["failed_runs"] == [] and outcome["runs"]
    assert "evaluating sessions" in computed.stderr
    exported = mce(mce_home, "export", "--output", str(tmp_path / "r.csv"), "--format", "csv", "--json", env=bars)
    assert json.loads(exported.stdout)["sessions"] == SESSIONS and "exporting sessions" in exported.stderr
    # Without a terminal, no bar: stderr holds nothing of it.
    plain = mce(mce_home, "export", "--output", str(tmp_path / "r2.csv"), "--format", "csv", "--json")
    assert "exporting sessions" not in plain.stderr and json.loads(plain.stdout)["rows"] > 0


def test_verbosity_sets_what_reaches_stderr(mce_home):
    quiet, info, debug = (mce(mce_home, *flags, "kg", "status", "--json") for flags in ((), ("-v",), ("-vv",)))
    for done in (quiet, info, debug):
        assert json.loads(done.stdout)["where"]  # stdout is the data at every level
    assert "INFO" not in quiet.stderr and "DEBUG" not in quiet.stderr
    assert "INFO mce_dagster.graph: knowledge graph:" in info.stderr and "DEBUG" not in info.stderr
    assert "DEBUG mce_dagster.cli: settings:" in debug.stderr and "INFO" in debug.stderr


def test_env_file_sets_variables_before_the_settings_are_read(mce_home, tmp_path):
    from mce_dagster.graph.embedded import EmbeddedFalkorDB

    other = tmp_path / "other-home"
    env_file = tmp_path / "other.env"
    env_file.write_text(f"# another deployment\nexport MCE_HOME='{other}'\nMCE_GRAPH_NAME=elsewhere\n")
    try:
        # The test's own MCE_HOME is set in the environment: the file wins.
        status = json.loads(mce(mce_home, "--env-file", str(env_file), "kg", "status", "--json").stdout)
        assert str(other) in status["where"] and "'elsewhere'" in status["where"] and status["sessions"] == 0
        mine = json.loads(mce(mce_home, "kg", "status", "--json").stdout)
        assert str(mce_home) in mine["where"] and mine["sessions"] > 0
    finally:
        EmbeddedFalkorDB(other).stop()


def test_a_missing_or_malformed_env_file_is_a_one_line_error(mce_home, tmp_path):
    missing = tmp_path / "absent.env"
    done = mce(mce_home, "--env-file", str(missing), "kg", "status", check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert f"--env-file {missing} does not exist" in done.stderr and "NAME=value" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    bad = tmp_path / "bad.env"
    bad.write_text("MCE_HOME=/tmp/x\nthis is not a variable\n")
    done = mce(mce_home, "--env-file", str(bad), "kg", "status", check=False)
    assert done.returncode == 2 and f"{bad}:2: expected NAME=value" in done.stderr and "Traceback" not in done.stderr


def test_an_unknown_session_says_what_to_do_next(mce_home):
    done = mce(mce_home, "kg", "metric", "get", "never-ingested", check=False)
    assert done.returncode == 1 and "mce compute never-ingested" in done.stderr
    done = mce(mce_home, "compute", "never-ingested", check=False)
    assert done.returncode == 1 and "not in the knowledge graph: never-ingested" in done.stderr
    assert "next: ingest them first" in done.stderr and len(done.stderr.strip().splitlines()) == 1
