"""The production files under deploy/: the Compose file as Compose reads it, and each
dagster.yaml and the Celery settings as Dagster validates them.

`docker compose config` needs a Compose CLI: Docker's plugin or Debian's docker-compose
(v1, no daemon needed to check a file). deploy/install-compose.sh installs the latter
with apt-get in CI; elsewhere the test skips without one."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from conftest import IN_CI, REPO, require

DEPLOY = REPO / "deploy"
DAGSTER_SERVICES = ("code-location", "webserver", "daemon", "celery-worker")
# What a deployment's processes need besides the instance's own variables.
REQUIRED_ENV = ("DAGSTER_HOME", "DAGSTER_EVENT_BATCH_SIZE", "NEO4J_URI", "NEO4J_USERNAME", "NEO4J_PASSWORD", "RABBITMQ_URL")
PG_ENV = {
    "DAGSTER_PG_HOST": "postgres",
    "DAGSTER_PG_PORT": "5432",
    "DAGSTER_PG_DB": "dagster",
    "DAGSTER_PG_USER": "dagster",
    "DAGSTER_PG_PASSWORD": "secret",
}
CLASS_SECTIONS = ("run_storage", "event_log_storage", "schedule_storage", "run_coordinator", "run_launcher")


def _compose_command() -> list[str] | None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if IN_CI:
        out = subprocess.run(["bash", str(DEPLOY / "install-compose.sh")], capture_output=True, text=True)
        assert out.returncode == 0, f"deploy/install-compose.sh failed:\n{out.stderr}"
        return out.stdout.split()
    return None


def _env_names(node) -> set[str]:
    """Every variable an `{env: NAME}` source in a config names."""
    if isinstance(node, dict):
        if set(node) == {"env"}:
            return {node["env"]}
        return set().union(*(_env_names(v) for v in node.values())) if node else set()
    if isinstance(node, list):
        return set().union(*(_env_names(v) for v in node)) if node else set()
    return set()


@pytest.fixture(scope="module")
def compose_config() -> dict:
    command = _compose_command()
    require(command is not None, "no Compose CLI: install Debian's docker-compose (bash deploy/install-compose.sh)")
    out = subprocess.run(
        [*command, "-f", str(DEPLOY / "docker-compose.yaml"), "config"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )
    assert out.returncode == 0, f"{' '.join(command)} config rejected deploy/docker-compose.yaml:\n{out.stderr}"
    return yaml.safe_load(out.stdout)


def test_compose_runs_webserver_daemon_and_the_grpc_code_location(compose_config):
    services = compose_config["services"]
    assert {"postgres", "neo4j", "rabbitmq", "code-location", "webserver", "daemon"} <= set(services)
    code = services["code-location"]["command"]
    assert code[:3] == ["dagster", "api", "grpc"] and "mce_dagster.definitions" in code, code
    port = int(code[code.index("--port") + 1])

    # The webserver and the daemon find the code location where Compose runs it.
    workspace = yaml.safe_load((DEPLOY / "workspace.yaml").read_text())
    (entry,) = workspace["load_from"]
    assert entry["grpc_server"]["host"] == "code-location"
    assert entry["grpc_server"]["port"] == port
    for name in ("webserver", "daemon"):
        command = services[name]["command"]
        assert command[command.index("-w") + 1] == "/opt/dagster/home/workspace.yaml", command
    assert services["webserver"]["command"][0] == "dagster-webserver"
    assert services["daemon"]["command"][:2] == ["dagster-daemon", "run"]


def test_every_dagster_process_has_what_the_instance_and_the_graph_read(compose_config):
    instance_env = _env_names(yaml.safe_load((DEPLOY / "dagster.yaml").read_text()))
    assert instance_env == set(PG_ENV)
    for name in DAGSTER_SERVICES:
        env = compose_config["services"][name]["environment"]
        missing = (instance_env | set(REQUIRED_ENV)) - {k for k, v in env.items() if v}
        assert not missing, f"{name} lacks {sorted(missing)}"
        assert env["DAGSTER_PG_HOST"] == "postgres" and env["NEO4J_URI"] == "bolt://neo4j:7687"
        assert int(env["DAGSTER_EVENT_BATCH_SIZE"]) > 1
    # The image puts the instance files where DAGSTER_HOME points.
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "DAGSTER_HOME=/opt/dagster/home" in dockerfile
    assert "COPY deploy/dagster.yaml deploy/workspace.yaml deploy/celery.yaml /opt/dagster/home/" in dockerfile


def test_the_dockerfile_copies_files_that_exist():
    copies = [line.split()[1:-1] for line in (DEPLOY / "Dockerfile").read_text().splitlines() if line.startswith("COPY ")]
    assert copies
    for sources in copies:
        for source in sources:
            assert (REPO / source).exists(), f"deploy/Dockerfile copies {source}, which is not in the repository"


def _validate_instance_yaml(path, tmp_path, monkeypatch) -> dict:
    """The file as Dagster loads it from $DAGSTER_HOME, then each configurable class's
    config checked against that class's own schema (nothing connects)."""
    from dagster._config import process_config
    from dagster._core.instance.config import dagster_instance_config
    from dagster._serdes.config_class import ConfigurableClassData, class_from_code_pointer

    for name, value in PG_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    (tmp_path / "dagster.yaml").write_text(path.read_text())
    config, _ = dagster_instance_config(str(tmp_path))
    for section in CLASS_SECTIONS:
        entry = config[section]
        # Dagster's own resolution of the module (`dagster.core...` is `dagster._core...`).
        data = ConfigurableClassData(entry["module"], entry["class"], "{}")
        klass = class_from_code_pointer(data.module_name, data.class_name)
        result = process_config(klass.config_type(), entry.get("config") or {})
        assert result.success, f"{path.name} {section} ({entry['class']}): {[e.message for e in result.errors]}"
    assert "storage" not in config  # cannot be combined with event_log_storage
    return config


def test_the_compose_dagster_yaml_validates(tmp_path, monkeypatch):
    from dagster._core.instance.ref import InstanceRef
    from dagster._core.launcher import DefaultRunLauncher, RunLauncher

    config = _validate_instance_yaml(DEPLOY / "dagster.yaml", tmp_path, monkeypatch)
    assert config["event_log_storage"]["class"] == "PooledPostgresEventLogStorage"
    ref = InstanceRef.from_dir(str(tmp_path))
    assert type(ref.run_launcher_data.rehydrate(RunLauncher)) is DefaultRunLauncher
    assert ref.settings["run_retries"]["enabled"] is True


def test_the_k8s_dagster_yaml_validates_against_k8s_run_launcher(tmp_path, monkeypatch):
    from dagster._config import process_config
    from dagster_k8s import K8sRunLauncher

    config = _validate_instance_yaml(DEPLOY / "k8s" / "dagster.yaml", tmp_path, monkeypatch)
    launcher = config["run_launcher"]
    assert (launcher["module"], launcher["class"]) == ("dagster_k8s", "K8sRunLauncher")
    processed = process_config(K8sRunLauncher.config_type(), launcher["config"]).value
    assert processed["instance_config_map"] and processed["job_image"]
    assert "DAGSTER_EVENT_BATCH_SIZE=1000" in processed["env_vars"]
    # The validation is Dagster's and it is strict: a misspelled key fails.
    bad = {**launcher["config"], "job_imagee": "x"}
    assert not process_config(K8sRunLauncher.config_type(), bad).success


def test_celery_workers_and_the_code_location_agree(monkeypatch):
    from dagster._config import process_config
    from dagster_celery.cli import get_validated_config
    from dagster_celery.executor import celery_executor

    monkeypatch.setenv("RABBITMQ_URL", "amqp://mce:mce@rabbitmq:5672/%2F")
    # What `dagster-celery worker start -y deploy/celery.yaml` validates and uses...
    workers = get_validated_config(str(DEPLOY / "celery.yaml"))
    assert workers["broker"] == "amqp://mce:mce@rabbitmq:5672/%2F"

    from mce_dagster.definitions_celery import CELERY_CONFIG, defs

    # ...equals what the code location's executor runs with.
    executor = process_config(celery_executor.config_schema.config_type, CELERY_CONFIG)
    assert executor.success
    assert executor.value == workers
    job = defs.resolve_job_def("evaluate_sessions")
    assert job.executor_def.name == "celery"
    assert defs.executor.name == "celery"  # the sensors' runs too
