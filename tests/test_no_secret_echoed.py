"""No secret in any message: with known passwords and keys in the environment, every
error path a command can reach (the graph, the judge, the session queue and the Dagster
instance's PostgreSQL unreachable; a malformed env file) says what went wrong, and the
secrets appear nowhere: not on stdout or stderr, not in the logs, not in any file under
MCE_HOME. Every server is a loopback port nothing listens on, so each connection is
refused at once."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import quote

import pytest

from conftest import REPO
from mce_dagster.errors import ConfigurationError
from mce_dagster.settings import masked_url, parse_env_file, redact

MCE = str(REPO / ".venv" / "bin" / "mce")
DAGSTER = str(REPO / ".venv" / "bin" / "dagster")

NEO4J_PASSWORD = "pw-neo4j-7f3a9c"
NEO4J_URI_PASSWORD = "uri-pw-51d2e8"
OPENAI_API_KEY = "sk-judge-0c9b44e1"
JUDGE_URL_PASSWORD = "judge-url-pw-4a1f"
RABBITMQ_PASSWORD = "amqp-pw-93e0aa"
DAGSTER_PG_PASSWORD = "pg-pw-2b7d61"
ENV_FILE_SECRET = "pw-envfile-66c1d0"
PASTED_KEY = "AKIAENVFILE9X2Q7Z"
SECRETS = (
    NEO4J_PASSWORD, NEO4J_URI_PASSWORD, OPENAI_API_KEY, JUDGE_URL_PASSWORD,
    RABBITMQ_PASSWORD, DAGSTER_PG_PASSWORD, ENV_FILE_SECRET, PASTED_KEY,
)


def unused_port() -> int:
    """A loopback port nothing listens on: bound by the system, then let go."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def leaked(text: str) -> list[str]:
    return [s for s in SECRETS if s in text or quote(s, safe="") in text]


class Probe:
    """Runs commands with the secrets set and keeps everything they printed."""

    def __init__(self, home: Path):
        self.home = home
        self.printed: list[tuple[tuple[str, ...], str]] = []
        self.base = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("NEO4J_", "KG_DB_", "RABBITMQ_", "DAGSTER_PG_", "LLM_", "OPENAI_"))},
            "MCE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), "MODEL_PRICES_REFRESH": "false",
            "NEO4J_PASSWORD": NEO4J_PASSWORD, "OPENAI_API_KEY": OPENAI_API_KEY, "DAGSTER_PG_PASSWORD": DAGSTER_PG_PASSWORD,
            "RABBITMQ_URL": f"amqp://mce:{RABBITMQ_PASSWORD}@127.0.0.1:{unused_port()}/%2F",
        }

    def run(self, *args: str, env: dict[str, str] | None = None, program: str = MCE, exit_code: int | None = 2) -> str:
        done = subprocess.run(
            [program, *args], capture_output=True, text=True, env={**self.base, **(env or {})}, cwd=REPO, timeout=180
        )
        said = done.stdout + done.stderr
        self.printed.append((args, said))
        if exit_code is not None:
            assert done.returncode == exit_code, (args, done.returncode, said[-3000:])
        return said


@pytest.fixture(scope="module")
def probe():
    home = Path(tempfile.mkdtemp(prefix="mce-sec-"))  # short: the embedded server's socket lives under it
    yield Probe(home)
    from mce_dagster.graph.embedded import EmbeddedFalkorDB

    EmbeddedFalkorDB(home).stop()
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def ingested(probe):
    export = probe.home / "sessions.json"
    probe.run("synth", str(export), "--sessions", "2", "--seed", "5", exit_code=0)
    probe.run("ingest", str(export), exit_code=0)
    return export


def test_an_unreachable_graph_with_a_password_in_its_uri(probe, ingested, tmp_path):
    port = unused_port()
    graph = {"NEO4J_URI": f"bolt://neo4j:{NEO4J_URI_PASSWORD}@127.0.0.1:{port}", "NEO4J_RETRY_SECONDS": "0"}
    for args in (("-vv", "kg", "status"), ("compute", "--all"), ("export", "-o", str(tmp_path / "r.parquet")),
                 ("report",), ("ingest", str(ingested)), ("kg", "metric", "get", "some-session")):
        said = probe.run(*args, env=graph)
        assert f"bolt://neo4j:***@127.0.0.1:{port}" in said and "NEO4J_PASSWORD" in said, (args, said)
        assert "Traceback" not in said


def test_an_unreachable_graph_with_its_password_apart(probe, ingested):
    port = unused_port()
    graph = {"NEO4J_URI": f"bolt://127.0.0.1:{port}", "NEO4J_RETRY_SECONDS": "0"}
    for args in (("-vv", "kg", "status"), ("compute", "--all"), ("kg", "metric", "get", "some-session")):
        said = probe.run(*args, env=graph)
        assert "the graph is unreachable" in said and f"127.0.0.1:{port}" in said, (args, said)


def test_an_unreachable_judge(probe, ingested, tmp_path):
    judge = {
        "LLM_MODEL_NAME": "openai/gpt-4o-mini",
        "LLM_BASE_MODEL_URL_MCE": f"http://mce:{JUDGE_URL_PASSWORD}@127.0.0.1:{unused_port()}/v1",
        "MCE_JUDGE_RETRIES": "0", "MCE_JUDGE_TIMEOUT": "5", "MCE_JUDGE_CACHE": "live",
    }
    said = probe.run("-vv", "compute", "--all", "--metrics", "Session/AnswerRelevancy,Session/GoalSuccessRate,Session/Duration", env=judge, exit_code=1)
    assert "metrics failed: Session/AnswerRelevancy on 2, Session/GoalSuccessRate on 2" in " ".join(said.split()), said[-3000:]
    probe.run("-vv", "report", env=judge, exit_code=0)
    probe.run("-vv", "export", "-o", str(tmp_path / "r.csv"), "--format", "csv", env=judge, exit_code=0)


def test_an_unreachable_session_queue(probe, ingested):
    """The queue sensor's tick, as the daemon runs it (no `mce` command reads the queue)."""
    preview = ("sensor", "preview", "session_queue_sensor", "-m", "mce_dagster.definitions")
    said = probe.run(*preview, program=DAGSTER, exit_code=None)
    assert "the session queue is unreachable (RabbitMQ at 127.0.0.1:" in said, said[-3000:]
    bad_port = {"RABBITMQ_URL": f"amqp://mce:{RABBITMQ_PASSWORD}@127.0.0.1:not-a-port/%2F"}
    said = probe.run(*preview, env=bad_port, program=DAGSTER, exit_code=None)
    assert "RABBITMQ_URL amqp://mce:***@127.0.0.1:not-a-port/%2F is not an AMQP URL" in said, said[-3000:]


def test_an_unreachable_instance_database(probe, ingested):
    pg_home = probe.home / "pg-instance"
    pg_home.mkdir(exist_ok=True)
    shutil.copy(REPO / "dagster.yaml", pg_home / "dagster.yaml")  # the production instance, PostgreSQL
    postgres = {
        "DAGSTER_HOME": str(pg_home), "DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": str(unused_port()),
        "DAGSTER_PG_DB": "dagster", "DAGSTER_PG_USER": "dagster",
    }
    said = probe.run("compute", "--all", env=postgres)
    assert "cannot reach its database" in said and "Connection refused" in said, said[-3000:]
    assert "Traceback" not in said


def test_a_malformed_env_file_names_the_line_and_the_variable(probe, tmp_path):
    env_file = tmp_path / "prod.env"  # outside MCE_HOME: the one file that holds the secrets
    for number, line in ((2, f"NEO4J_PASSWORD {ENV_FILE_SECRET}"), (2, f"OPENAI_API_KEY: {ENV_FILE_SECRET}=x"), (2, PASTED_KEY)):
        env_file.write_text(f"MCE_GRAPH_NAME=mce\n{line}\n")
        said = probe.run("--env-file", str(env_file), "kg", "status")
        assert f"{env_file}:{number}" in said and "expected NAME=value" in said, said
        named = line.split()[0].rstrip(":")
        assert (f"({named})" in said) == (named != PASTED_KEY), said


def test_no_secret_was_printed_logged_or_written(probe):
    """Last in the module: everything the tests above ran."""
    assert len(probe.printed) > 10
    printed = [(args, leaked(said)) for args, said in probe.printed if leaked(said)]
    assert printed == [], printed
    written = []
    for path in probe.home.rglob("*"):
        if path.is_file():
            found = leaked(path.read_bytes().decode("latin-1"))
            if found:
                written.append((str(path.relative_to(probe.home)), found))
    assert written == [], written
    assert list((probe.home / "dagster").rglob("*.db")), "the runs' event logs were looked at"


def test_urls_are_shown_with_their_credentials_masked():
    assert masked_url("bolt://neo4j:s3cret@db:7687") == "bolt://neo4j:***@db:7687"
    assert masked_url("amqp://mce:p%40ss/word@mq:5672/%2F") == "amqp://mce:***@mq:5672/%2F"
    assert masked_url("https://sk-token@judge.example/v1") == "https://***@judge.example/v1"
    assert masked_url("bolt://db:7687") == "bolt://db:7687"
    env = {"RABBITMQ_URL": "amqp://mce:p%40ss@mq/%2F", "OPENAI_API_KEY": "sk-abcdef", "NEO4J_PASSWORD": ""}
    assert redact("refused p@ss, p%40ss and sk-abcdef", env) == "refused ***, *** and ***"
    assert redact("Given URI: 'bolt://u:pw-1234@db'", {}, also=("bolt://u:pw-1234@db",)) == "Given URI: 'bolt://u:***@db'"


def test_env_file_errors_name_the_line_and_the_variable_never_the_value():
    for line, named in (("NEO4J_PASSWORD hunter2-long", "(NEO4J_PASSWORD)"), ("export NEO4J_PASSWORD: a=b", "(NEO4J_PASSWORD)"),
                        ("sk-proj-abcdef", None), ("ghp_ABCdef123456", None)):
        with pytest.raises(ConfigurationError) as raised:
            parse_env_file(f"A=1\n\n{line}\n", "prod.env")
        message = str(raised.value)
        assert message.startswith("prod.env:3") and "expected NAME=value" in message
        value = line.removeprefix("export ").split(maxsplit=1)[-1] if named else line
        assert value not in message and (named is None or named in message), message
