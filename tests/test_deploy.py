"""The production files under deploy/: the Compose file as Compose reads it, and each
dagster.yaml and the Celery settings as Dagster validates them; and the Compose file
fails closed: no default password, nothing published beyond loopback.

`docker compose config` needs a Compose CLI: Docker's plugin or Debian's docker-compose
(v1, no daemon needed to check a file). deploy/install-compose.sh installs the latter
with apt-get in CI; elsewhere those tests skip without one. The fail-closed tests read
the file themselves, with Compose's interpolation rules, and run everywhere."""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
from urllib.parse import urlsplit

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
COMPOSE = DEPLOY / "docker-compose.yaml"
#: What the Compose file must be given: it has no default for any of them.
COMPOSE_PASSWORDS = {"POSTGRES_PASSWORD": "test-pg-pw", "NEO4J_PASSWORD": "test-neo4j-pw", "RABBITMQ_PASSWORD": "test-amqp-pw"}
#: The defaults it once fell back to, known to anyone who read it.
OLD_DEFAULT_PASSWORDS = ("mce-neo4j-prod", "${POSTGRES_PASSWORD:-dagster}", "${RABBITMQ_PASSWORD:-mce}")
# A variable or an environment key that holds a secret.
SECRET_NAME = re.compile(r"PASSWORD|_PASS$|SECRET|TOKEN|API_KEY|_AUTH$")
# Compose's `${NAME}`, `${NAME:-default}`, `${NAME-default}`, `${NAME:?message}`, `${NAME?message}`.
REFERENCE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}")


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
def compose_command() -> list[str]:
    command = _compose_command()
    require(command is not None, "no Compose CLI: install Debian's docker-compose (bash deploy/install-compose.sh)")
    return command


def _compose_env(**given: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in COMPOSE_PASSWORDS and k != "MCE_BIND"}
    return {**env, **given}


@pytest.fixture(scope="module")
def compose_config(compose_command) -> dict:
    out = subprocess.run(
        [*compose_command, "-f", str(COMPOSE), "config"],
        capture_output=True, text=True, cwd=REPO, timeout=120, env=_compose_env(**COMPOSE_PASSWORDS),
    )
    assert out.returncode == 0, f"{' '.join(compose_command)} config rejected deploy/docker-compose.yaml:\n{out.stderr}"
    return yaml.safe_load(out.stdout)


def test_compose_refuses_to_start_without_its_passwords(compose_command):
    for missing in COMPOSE_PASSWORDS:
        given = {k: v for k, v in COMPOSE_PASSWORDS.items() if k != missing}
        out = subprocess.run(
            [*compose_command, "-f", str(COMPOSE), "config"],
            capture_output=True, text=True, cwd=REPO, timeout=120, env=_compose_env(**given),
        )
        assert out.returncode != 0 and missing in out.stderr, (missing, out.stderr)


def test_compose_publishes_the_webserver_on_loopback_only(compose_config):
    (published,) = compose_config["services"]["webserver"]["ports"]
    host_ip = published["host_ip"] if isinstance(published, dict) else str(published).rsplit(":", 2)[0]
    assert host_ip == "127.0.0.1", published


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


# -- the Compose file fails closed, read as Compose reads it (no Compose CLI needed) --


class MissingVariable(Exception):
    pass


def _interpolate(value: str, env: dict[str, str]) -> str:
    """`value` with its variables replaced as Compose replaces them."""

    def one(match: re.Match) -> str:
        name, op, arg = match["name"], match["op"] or "", match["arg"] or ""
        given = env.get(name)
        unset = given is None or (op.startswith(":") and given == "")
        if op.endswith("?") and unset:
            raise MissingVariable(f"{name}: {arg}")
        if op.endswith("-") and unset:
            return arg
        if op.endswith("+"):
            return "" if unset else arg
        return given or ""

    return REFERENCE.sub(one, value)


def _compose_file() -> dict:
    return yaml.safe_load(COMPOSE.read_text())  # `<<` merges resolved, as Compose resolves them


def _environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.partition("=")[::2] for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def _host_ip(port) -> str:
    """The address a published port listens on; "" for every interface."""
    if isinstance(port, dict):
        return port.get("host_ip", "")
    spec = str(port).split("/")[0]
    if spec.startswith("["):
        return spec[1:spec.index("]")]
    parts = spec.split(":")
    return parts[0] if len(parts) == 3 else ""  # CONTAINER and HOST:CONTAINER bind every interface


def test_the_fail_closed_checks_see_what_they_forbid():
    assert _host_ip("3000:3000") == "" and _host_ip("3000") == "" and _host_ip("0.0.0.0:3000:3000") == "0.0.0.0"
    assert _host_ip("[::1]:3000:3000/tcp") == "::1" and _host_ip({"target": 3000, "published": 3000}) == ""
    assert _interpolate("${A:-x}/${B:?need B}", {"B": "b"}) == "x/b"
    with pytest.raises(MissingVariable, match="B: need B"):
        _interpolate("${B:?need B}", {"B": ""})


def test_no_published_port_binds_every_interface():
    published = []
    for name, service in _compose_file()["services"].items():
        assert service.get("network_mode") != "host", f"{name} shares the host's network: every port it opens is public"
        for port in service.get("ports") or []:
            port = {k: _interpolate(str(v), {}) for k, v in port.items()} if isinstance(port, dict) else _interpolate(str(port), {})
            host_ip = _host_ip(port)
            assert host_ip and ipaddress.ip_address(host_ip).is_loopback, f"{name} publishes {port} beyond loopback"
            published.append(name)
    assert published == ["webserver"]
    # Another address only when asked for (behind a proxy on another host, say).
    (port,) = _compose_file()["services"]["webserver"]["ports"]
    assert _host_ip(_interpolate(port, {"MCE_BIND": "10.0.0.5"})) == "10.0.0.5"


def test_every_password_variable_is_required():
    references = [m for m in REFERENCE.finditer(COMPOSE.read_text()) if SECRET_NAME.search(m["name"])]
    assert {m["name"] for m in references} == set(COMPOSE_PASSWORDS)
    for m in references:
        assert m["op"] == ":?" and m["arg"].strip(), f"{m.group()} must be ${{{m['name']}:?message}}: no default, not even empty"
    # Interpolated without them, every service that uses one fails, naming it.
    users = 0
    for name, service in _compose_file()["services"].items():
        for key, value in _environment(service).items():
            if REFERENCE.search(value) and SECRET_NAME.search(REFERENCE.search(value)["name"]):
                users += 1
                with pytest.raises(MissingVariable, match=REFERENCE.search(value)["name"]):
                    _interpolate(value, {})
    assert users >= 6  # postgres, neo4j, rabbitmq and the Dagster processes' three


def _url_password(value: str) -> re.Match | str | None:
    """The password inside a URL value: the variable reference it is, or the literal."""
    references: dict[str, re.Match] = {}

    def keep(match: re.Match) -> str:
        token = f"reference{len(references)}"
        references[token] = match
        return token

    plain = REFERENCE.sub(keep, value)  # a message of `${NAME:?...}` may hold a `/` or an `@`
    password = urlsplit(plain).password if "://" in plain else None
    return None if password is None else references.get(password, password)


def test_no_default_password_literal_remains():
    text = COMPOSE.read_text()
    url_passwords = 0
    for literal in OLD_DEFAULT_PASSWORDS:
        assert literal not in text, f"deploy/docker-compose.yaml still falls back to {literal!r}"
    for name, service in _compose_file()["services"].items():
        for key, value in _environment(service).items():
            if SECRET_NAME.search(key):
                # Only a required variable, beside at most a user name (NEO4J_AUTH is user/password).
                bare = REFERENCE.sub("", value)
                assert REFERENCE.search(value) and all(m["op"] == ":?" for m in REFERENCE.finditer(value)), (name, key, value)
                assert bare in ("", "neo4j/"), f"{name} {key} holds a literal: {bare!r}"
            password = _url_password(value)
            if password is not None:
                # The password inside a URL (RABBITMQ_URL): a required variable too.
                url_passwords += 1
                assert isinstance(password, re.Match) and password["op"] == ":?", (name, key, value)
    assert url_passwords >= 1
