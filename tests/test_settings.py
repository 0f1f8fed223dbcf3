"""The settings and the resources that carry them: every variable read through
pydantic-settings with its default and the project's own message for a wrong value;
env files read by python-dotenv's parser, an error naming the line and the variable,
never the value; the resources built once from the settings, a secret only ever as
the variable's name; no run step or sensor tick reading the environment; and a run on
the local default instance recording, as the UI shows it, the judge model it used and
no secret."""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
import pytest

from mce_dagster.errors import ConfigurationError
from mce_dagster.settings import READ_VARIABLES, VARIABLES, Settings, parse_env_file

API_KEY = "sk-settings-5e1f0a7c"
NEO4J_PASSWORD = "pw-settings-0b93d2"
RABBITMQ_PASSWORD = "amqp-settings-7d41c8"


def test_every_variable_is_read_and_unset_means_its_default(tmp_path, monkeypatch):
    names = {name for name, _, _ in VARIABLES}
    assert names <= set(READ_VARIABLES)
    # Beside them only the older names of the Neo4j variables.
    assert set(READ_VARIABLES) - names == {"KG_DB_PORT", "KG_DB_USER", "KG_DB_PASSWORD", "KG_DB_NAME"}
    monkeypatch.chdir(tmp_path)
    s = Settings.from_env({})
    assert s.mce_home == tmp_path.resolve() / ".mce" and s.dagster_home == s.mce_home / "dagster"
    assert (s.graph_name, s.graph_backend, s.neo4j_user, s.neo4j_retry_seconds) == ("mce", "embedded", "neo4j", 30.0)
    assert (s.graph_retries, s.graph_retry_wait_seconds) == (3, 10.0)
    assert s.rabbitmq_url == "amqp://guest:guest@127.0.0.1:5672/%2F" and s.session_queue == "new_session_to_mce"
    assert (s.sensor_batch, s.sensor_tick_seconds, s.sensor_interval, s.announce_wait_seconds) == (500, 20.0, 10, 600.0)
    assert (s.api_token, s.allowed_hosts, s.max_request_bytes, s.query_results_kept) == (None, (), 1_048_576, 200)
    j = s.judge
    assert not j.configured and (j.samples, j.temperature, j.concurrency, j.timeout, j.retries, j.max_tokens) == (1, 0.0, 8, 60.0, 4, 512)
    assert (j.cache, j.cache_path, j.budget_usd, j.logprobs) == ("off", s.mce_home / "judge-cache.sqlite", None, True)
    assert (s.prices.refresh, s.prices.ttl_seconds, s.prices.path) == (True, 86400.0, None)
    assert s.explicit == frozenset()
    # Empty is unset, for every variable.
    assert Settings.from_env({name: "" for name in READ_VARIABLES}) == s


def test_choices_and_the_defaults_that_follow_from_them():
    s = Settings.from_env({
        "MCE_HOME": "/srv/mce", "KG_DB_HOST": "db", "KG_DB_USER": "kg", "KG_DB_PASSWORD": NEO4J_PASSWORD,
        "RABBITMQ_USER": "u s", "RABBITMQ_PASSWORD": "p@/ss", "RABBITMQ_VHOST": "v/h", "LLM_MODEL_NAME": "  openai/gpt-4o-mini ",
        "MCE_JUDGE_SAMPLES": "3", "MCE_JUDGE_CACHE": " Replay", "MCE_ALLOWED_HOSTS": "Proxy.example, b:8443,,",
        "MCE_JUDGE_LOGPROBS": "off", "MODEL_PRICES_REFRESH": "maybe",
    })
    assert s.neo4j_uri == "bolt://db:7687" and (s.neo4j_user, s.neo4j_password) == ("kg", NEO4J_PASSWORD)
    assert s.rabbitmq_url == "amqp://u%20s:p%40%2Fss@127.0.0.1:5672/v%2Fh"
    assert s.judge.model == "openai/gpt-4o-mini" and s.judge.temperature == 0.7 and s.judge.cache == "replay"
    assert s.judge.cache_path == Path("/srv/mce/judge-cache.sqlite") and s.dagster_home == Path("/srv/mce/dagster")
    assert s.allowed_hosts == ("proxy.example", "b:8443") and s.judge.logprobs is False and s.prices.refresh is True
    assert {"KG_DB_HOST", "KG_DB_PASSWORD", "LLM_MODEL_NAME"} <= s.explicit
    # The newer name wins over the older one.
    assert Settings.from_env({"NEO4J_USERNAME": "new", "KG_DB_USER": "old"}).neo4j_user == "new"


#: A value each variable may take.
VALUES = {
    "MCE_HOME": "/tmp/mce-settings", "DAGSTER_HOME": "/tmp/mce-settings/d", "MCE_GRAPH_NAME": "g", "MCE_CONFIG": "/tmp/c.yaml",
    "MODEL_PRICES_PATH": "/tmp/p.json", "NEO4J_URI": "bolt://db:7687", "KG_DB_HOST": "kg", "KG_DB_PORT": "7688",
    "NEO4J_USERNAME": "n", "KG_DB_USER": "k", "NEO4J_PASSWORD": NEO4J_PASSWORD, "KG_DB_PASSWORD": "kp", "NEO4J_DATABASE": "d",
    "KG_DB_NAME": "kd", "NEO4J_RETRY_SECONDS": "2.5", "MCE_GRAPH_RETRIES": "1", "MCE_GRAPH_RETRY_WAIT_SECONDS": "0",
    "RABBITMQ_URL": f"amqp://u:{RABBITMQ_PASSWORD}@mq/%2F", "RABBITMQ_HOST": "mq", "RABBITMQ_PORT": "5673", "RABBITMQ_USER": "u",
    "RABBITMQ_PASSWORD": RABBITMQ_PASSWORD, "RABBITMQ_VHOST": "v", "MCE_SESSION_QUEUE": "q", "MCE_SENSOR_BATCH": "7",
    "MCE_SENSOR_TICK_SECONDS": "5", "MCE_SENSOR_INTERVAL": "3", "MCE_ANNOUNCE_WAIT_SECONDS": "9", "MCE_API_TOKEN": "t" * 24,
    "MCE_ALLOWED_HOSTS": "proxy.example, b:8443", "MCE_MAX_REQUEST_BYTES": "4096", "MCE_QUERY_RESULTS_KEPT": "5",
    "MCE_JUDGE_SAMPLES": "2", "MCE_JUDGE_CACHE": "live", "MCE_JUDGE_CONCURRENCY": "3", "MCE_JUDGE_TEMPERATURE": "0.2",
    "MCE_JUDGE_TIMEOUT": "9", "MCE_JUDGE_RETRIES": "1", "MCE_JUDGE_MAX_TOKENS": "64", "MCE_JUDGE_CACHE_PATH": "/tmp/c.sqlite",
    "MCE_JUDGE_BUDGET_USD": "0.5", "MCE_JUDGE_EMBEDDING_MODEL": "e", "MCE_JUDGE_LOGPROBS": "no", "LLM_MODEL_NAME": "m",
    "OPENAI_API_KEY": API_KEY, "LLM_BASE_MODEL_URL_MCE": "http://judge/v1", "MODEL_PRICES_REFRESH": "false",
    "MODEL_PRICES_URL": "http://prices/table.json", "MODEL_PRICES_TTL_SECONDS": "60",
}


def test_the_process_environment_reads_as_the_same_mapping_does(monkeypatch):
    assert set(VALUES) == set(READ_VARIABLES)
    for name, value in VALUES.items():
        monkeypatch.setenv(name, value)
    read = Settings.from_env()
    assert read == Settings.from_env(dict(os.environ)) and read.explicit == frozenset(VALUES)
    assert read.allowed_hosts == ("proxy.example", "b:8443") and read.judge.budget_usd == 0.5


@pytest.mark.parametrize("env, message", [
    ({"MCE_SENSOR_BATCH": "0"}, "MCE_SENSOR_BATCH='0' is below its minimum 1"),
    ({"MCE_SENSOR_BATCH": "many"}, "MCE_SENSOR_BATCH='many' is not a number"),
    ({"MCE_GRAPH_RETRIES": "1.5"}, "MCE_GRAPH_RETRIES='1.5' is not a number"),
    ({"NEO4J_RETRY_SECONDS": "-1"}, "NEO4J_RETRY_SECONDS='-1' is below its minimum 0.0"),
    ({"MCE_MAX_REQUEST_BYTES": "10"}, "MCE_MAX_REQUEST_BYTES='10' is below its minimum 1024"),
    ({"MCE_JUDGE_SAMPLES": "0"}, "MCE_JUDGE_SAMPLES=0 must be 1 or more"),
    ({"MCE_JUDGE_SAMPLES": "1.5"}, "MCE_JUDGE_SAMPLES='1.5' is not an integer"),
    ({"MCE_JUDGE_CONCURRENCY": "-2"}, "MCE_JUDGE_CONCURRENCY=-2 must be 1 or more"),
    ({"MCE_JUDGE_CACHE": "Sometimes"}, "MCE_JUDGE_CACHE='sometimes' is not one of off, live, record, replay"),
    ({"MCE_JUDGE_MAX_TOKENS": "lots"}, "MCE_JUDGE_MAX_TOKENS='lots' is not an integer"),
    ({"MCE_JUDGE_BUDGET_USD": "$1"}, "MCE_JUDGE_BUDGET_USD='$1' is not a number"),
    ({"MODEL_PRICES_TTL_SECONDS": "daily"}, "MODEL_PRICES_TTL_SECONDS='daily' is not a number"),
])
def test_a_wrong_value_is_a_configuration_error_naming_the_variable(env, message):
    with pytest.raises(ConfigurationError) as raised:
        Settings.from_env({**env, "NEO4J_PASSWORD": NEO4J_PASSWORD, "OPENAI_API_KEY": API_KEY})
    assert str(raised.value) == message


def test_secrets_are_never_in_a_settings_repr():
    s = Settings.from_env({
        "NEO4J_URI": f"bolt://neo4j:{NEO4J_PASSWORD}@db:7687", "NEO4J_PASSWORD": NEO4J_PASSWORD, "OPENAI_API_KEY": API_KEY,
        "RABBITMQ_PASSWORD": RABBITMQ_PASSWORD, "MCE_API_TOKEN": "t" * 24, "LLM_BASE_MODEL_URL_MCE": f"http://u:{API_KEY}@judge/v1",
    })
    shown = repr(s) + repr(s.graph) + repr(s.queue) + repr(s.judge)
    assert not [x for x in (NEO4J_PASSWORD, API_KEY, RABBITMQ_PASSWORD, "t" * 24) if x in shown], shown


def test_an_env_file_reads_as_python_dotenv_reads_it():
    text = (
        "# the deployment\n\nexport MCE_HOME='/srv/mce'\nNEO4J_PASSWORD=\"p w#1\"\n"
        "MCE_GRAPH_NAME=prod # the graph\nLLM_MODEL_NAME=  openai/gpt-4o-mini\nEMPTY=\n"
    )
    assert parse_env_file(text) == {
        "MCE_HOME": "/srv/mce", "NEO4J_PASSWORD": "p w#1", "MCE_GRAPH_NAME": "prod", "LLM_MODEL_NAME": "openai/gpt-4o-mini", "EMPTY": "",
    }


@pytest.mark.parametrize("line, named, found", [
    ("NEO4J_PASSWORD hunter2-long", "NEO4J_PASSWORD", "no '='"),
    ("OPENAI_API_KEY: sk-a=b", "OPENAI_API_KEY", "something other than a variable name"),
    ("my-key=sk-abcdef", None, "something other than a variable name"),
    ("NEO4J_PASSWORD='hunter2-long", None, "a quote left open"),
    ("sk-proj-abcdef", None, "no '='"),
])
def test_an_env_file_error_names_the_line_after_blank_ones_and_never_the_value(line, named, found):
    with pytest.raises(ConfigurationError) as raised:
        parse_env_file(f"A=1\n\n\n   \n{line}\nB=2\n", "prod.env")
    message = str(raised.value)
    assert message.startswith(f"prod.env:5{f' ({named})' if named else ''}: expected NAME=value") and found in message, message
    for secret in ("hunter2-long", "sk-a", "sk-abcdef", "sk-proj-abcdef"):
        assert secret not in message


# -- the resources -------------------------------------------------------------------------


def _resource_config(resources: dict, key: str) -> dict:
    """A resource's configuration as Dagster records it: the values, `{"env": NAME}`
    for a field given as `dg.EnvVar`."""
    definition = resources[key].get_resource_definition()
    return json.loads(json.dumps(definition.config_schema.as_field().default_value))


def test_the_resources_carry_the_settings_and_a_secret_only_as_its_variable():
    from mce_dagster.defs.resources import build_resources

    env = {
        "MCE_HOME": "/srv/mce", "NEO4J_URI": f"bolt://neo4j:{NEO4J_PASSWORD}@db:7687", "NEO4J_PASSWORD": NEO4J_PASSWORD,
        "LLM_MODEL_NAME": "openai/gpt-4o-mini", "OPENAI_API_KEY": API_KEY, "LLM_BASE_MODEL_URL_MCE": "http://judge:8000/v1",
        "MCE_JUDGE_SAMPLES": "3", "MCE_JUDGE_BUDGET_USD": "0.5", "RABBITMQ_PASSWORD": RABBITMQ_PASSWORD, "RABBITMQ_HOST": "mq",
        "MODEL_PRICES_REFRESH": "false", "MCE_SENSOR_BATCH": "50",
    }
    resources = build_resources(Settings.from_env(env))
    judge = _resource_config(resources, "judge")
    assert (judge["model"], judge["base_url"], judge["samples"], judge["budget_usd"]) == ("openai/gpt-4o-mini", "http://judge:8000/v1", 3, 0.5)
    assert judge["api_key"] == {"env": "OPENAI_API_KEY"}
    graph = _resource_config(resources, "knowledge_graph")
    assert graph["uri"] == {"env": "NEO4J_URI"} and graph["password"] == {"env": "NEO4J_PASSWORD"}
    queue = _resource_config(resources, "session_queue")
    assert (queue["host"], queue["password"], queue["batch"]) == ("mq", {"env": "RABBITMQ_PASSWORD"}, 50)
    assert _resource_config(resources, "prices")["refresh"] is False
    assert _resource_config(resources, "local_files") == {"mce_home": "/srv/mce"}
    everything = json.dumps([_resource_config(resources, k) for k in resources])
    assert not [x for x in (NEO4J_PASSWORD, API_KEY, RABBITMQ_PASSWORD) if x in everything], everything
    # Where nothing is secret, the values themselves, which the UI shows.
    plain = build_resources(Settings.from_env({"MCE_HOME": "/srv/mce", "MCE_GRAPH_NAME": "prod"}))
    assert _resource_config(plain, "knowledge_graph") == {"mce_home": "/srv/mce", "graph_name": "prod", "retries": 3, "retry_wait_seconds": 10.0}
    assert _resource_config(plain, "session_queue")["password"] == "guest"


def test_the_resources_resolve_to_the_settings_they_were_made_from(monkeypatch):
    from mce_dagster.defs.resources import build_resources

    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("RABBITMQ_PASSWORD", RABBITMQ_PASSWORD)
    monkeypatch.setenv("RABBITMQ_VHOST", "v/h")
    settings = Settings.from_env()
    resources = build_resources(settings)
    with dg.build_resources({k: resources[k] for k in ("judge", "session_queue")}) as built:
        assert built.judge.settings() == settings.judge
        assert built.session_queue.settings() == settings.queue


@pytest.fixture(scope="module")
def evaluated_sessions(kg, tmp_path_factory):
    from mce_dagster.ingest import ingest_paths
    from mce_dagster.synthetic import write_export

    path = tmp_path_factory.mktemp("settings") / "sessions.json"
    write_export(path, 3, seed=31)
    return ingest_paths([path], kg).sessions


def test_no_run_step_or_sensor_tick_reads_the_environment(evaluated_sessions, mce_home, monkeypatch):
    from mce_dagster.definitions import build_definitions, runtime
    from mce_dagster.defs.assets import SESSION_CONTEXT_KEY, asset_key
    from mce_dagster.defs.report import EVALUATION_REPORT_KEY
    from mce_dagster.defs.sensors import POLL_SENSOR
    from mce_dagster.evaluation import QUIET_RUN_CONFIG, RANGE_END, RANGE_START
    from mce_dagster.core.ontology import Scope

    catalog, config = runtime()
    defs = build_definitions(catalog, config, Settings.from_env())
    read: list[str] = []

    def refused(cls, env=None):
        read.append("Settings.from_env")
        raise AssertionError("the environment was read inside a step or a tick")

    monkeypatch.setattr(Settings, "from_env", classmethod(refused))
    ids = sorted(evaluated_sessions)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("sessions", ids)
        # Every enabled metric, judged ones too (with no judge model they fail their
        # entities, not the run), and a provider's metric whose library needs no judge.
        libraries = [dg.AssetKey(["Session", "ragas_ToolCallAccuracy"])]
        sessions_run = dg.materialize(
            assets=list(defs.assets), resources=defs.resources, instance=instance, run_config=QUIET_RUN_CONFIG,
            selection=[SESSION_CONTEXT_KEY, *(asset_key(m.key) for m in config.enabled if m.scope is not Scope.POPULATION), *libraries],
            tags={RANGE_START: ids[0], RANGE_END: ids[-1]},
        )
        assert sessions_run.success
        for key in libraries:
            (event, *_) = sessions_run.asset_materializations_for_node(key.to_python_identifier())
            # The library ran (a library that did not fails every entity with the reason).
            assert event.metadata["failed"].value == 0 and event.metadata["evaluated"].value > 0, (key, event.metadata.get("failures"))
        population = [asset_key(m.key) for m in catalog.ordered() if m.scope is Scope.POPULATION]
        others = dg.materialize(
            assets=list(defs.assets), resources=defs.resources, instance=instance, run_config=QUIET_RUN_CONFIG,
            selection=[*population, EVALUATION_REPORT_KEY],
        )
        assert others.success and population
        sensor = defs.get_sensor_def(POLL_SENSOR)
        context = dg.build_sensor_context(instance=instance, definitions=defs, resources={"knowledge_graph": defs.resources["knowledge_graph"]})
        sensor(context)
    assert read == []
    assert (mce_home / "reports" / "evaluation_report.html").is_file()


# -- what a run on the local default instance recorded -----------------------------------------


_RUN = """
query ($runId: ID!) { runOrError(runId: $runId) { __typename ... on Run { runId jobName pipelineSnapshotId runConfigYaml } } }
"""
_SNAPSHOT = """
query ($id: String!) {
  pipelineSnapshotOrError(snapshotId: $id) {
    __typename
    ... on PipelineSnapshot { modes { resources { name configField { defaultValueAsJson } } } }
  }
}
"""


def test_a_run_records_the_judge_model_it_used_and_no_secret(evaluated_sessions, mce_home):
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import EmptyWorkspaceTarget
    from dagster._serdes import serialize_value
    from dagster_graphql.test.utils import execute_dagster_graphql

    from openai_server import Completion, FakeOpenAI
    from test_cli import mce

    with FakeOpenAI(lambda request: Completion("It answers.\nScore: 4", {"4": 1.0}, 80, 6)) as server:
        env = {
            "LLM_MODEL_NAME": "gpt-4o-mini", "OPENAI_API_KEY": API_KEY, "LLM_BASE_MODEL_URL_MCE": server.base_url,
            "MCE_JUDGE_SAMPLES": "2", "MCE_JUDGE_BUDGET_USD": "0.25", "MODEL_PRICES_REFRESH": "false",
        }
        done = mce(mce_home, "compute", *evaluated_sessions, "--metrics", "Session/AnswerRelevancy", "--json", env=env)
        assert server.requests, done.stderr
    runs = json.loads(done.stdout)["runs"]
    assert runs

    # The local default instance `mce compute` wrote to, as the webserver reads it.
    with dg.DagsterInstance.from_config(str(mce_home / "dagster")) as instance:
        recorded = []
        for run_id in runs:
            run = instance.get_run_by_id(run_id)
            snapshot = instance.get_job_snapshot(run.job_snapshot_id)
            (mode,) = snapshot.mode_def_snaps
            configs = {r.name: json.loads(r.config_field_snap.default_value_as_json_str) for r in mode.resource_def_snaps if r.config_field_snap}
            recorded.append(serialize_value(run) + serialize_value(snapshot))
            judge = configs["judge"]
            assert (judge["model"], judge["base_url"], judge["samples"], judge["budget_usd"]) == ("gpt-4o-mini", server.base_url, 2, 0.25)
            assert judge["api_key"] == {"env": "OPENAI_API_KEY"}
            assert configs["knowledge_graph"]["mce_home"] == str(mce_home)
        with WorkspaceProcessContext(instance, EmptyWorkspaceTarget()) as process:
            context = process.create_request_context()
            shown = execute_dagster_graphql(context, _RUN, {"runId": runs[0]}).data["runOrError"]
            assert shown["__typename"] == "Run", shown
            snapshot = execute_dagster_graphql(context, _SNAPSHOT, {"id": shown["pipelineSnapshotId"]}).data["pipelineSnapshotOrError"]
    assert snapshot["__typename"] == "PipelineSnapshot", snapshot
    (mode,) = snapshot["modes"]
    ui = {r["name"]: json.loads(r["configField"]["defaultValueAsJson"]) for r in mode["resources"] if r["configField"]}
    assert ui["judge"]["model"] == "gpt-4o-mini" and ui["judge"]["api_key"] == {"env": "OPENAI_API_KEY"}
    everything = json.dumps([shown, snapshot]) + "".join(recorded)
    assert API_KEY not in everything
