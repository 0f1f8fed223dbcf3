"""Every dagster.yaml of the project, made from one set of sections: the local
instance `mce` writes under DAGSTER_HOME (SQLite), and the production ones
(PostgreSQL) at the root of the repository and in deploy/ (Compose, Kubernetes).
What they share is written once here; each file is its sections in order.

    python -m mce_dagster.instance.dagster_yaml          # rewrite the three files of the repository
    python -m mce_dagster.instance.dagster_yaml --check  # exit 1 when one differs from what this writes

The local one is a template (`local_instance_yaml` fills in its folders); the test
suite checks that the committed files are what this module writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

# -- storage ---------------------------------------------------------------------------

# `dagster._core.storage.runs` / `.schedules`: the module paths of Dagster's SQLite run
# and schedule storages as its own instance docs name them in dagster.yaml.
SQLITE_STORAGE = """\
# Dagster's SQLite layout (history/, history/runs/, schedules/ under this folder);
# the event log keeps its connections and writes a batch of events at once.
run_storage:
  module: dagster._core.storage.runs
  class: SqliteRunStorage
  config:
    base_dir: {runs}
event_log_storage:
  module: mce_dagster.instance.sqlite
  class: PooledSqliteEventLogStorage
  config:
    base_dir: {events}
schedule_storage:
  module: dagster._core.storage.schedules
  class: SqliteScheduleStorage
  config:
    base_dir: {schedules}
"""

POSTGRES_STORAGE = """\
# Storage in PostgreSQL (dagster-postgres), credentials from the environment. Runs and
# schedules are stock; the event log is dagster-postgres' with pooled connections and
# one transaction per event batch (mce_dagster/instance/postgres.py), on the same
# tables. A `storage:` block cannot be combined with it, so each is listed on its own.
run_storage:
  module: dagster_postgres.run_storage
  class: PostgresRunStorage
  config:
    postgres_db: &postgres_db
      hostname:
        env: DAGSTER_PG_HOST
      port:
        env: DAGSTER_PG_PORT
      db_name:
        env: DAGSTER_PG_DB
      username:
        env: DAGSTER_PG_USER
      password:
        env: DAGSTER_PG_PASSWORD
event_log_storage:
  module: mce_dagster.instance.postgres
  class: PooledPostgresEventLogStorage
  config:
    postgres_db: *postgres_db
schedule_storage:
  module: dagster_postgres.schedule_storage
  class: PostgresScheduleStorage
  config:
    postgres_db: *postgres_db
"""

# -- runs ------------------------------------------------------------------------------

QUEUED_RUNS = """\
# Runs wait in a queue: the sensors and the REST API may ask for many, the machine
# runs a few (the REST API refuses to serve an instance without a queue).
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
"""

LOCAL_QUEUED_RUNS = """\
# Runs the UI, the sensors and the REST API submit wait in a queue, and the daemon
# (`dagster dev`, or the one `mce serve --api` starts) launches at most
# max_concurrent_runs of them at once (each takes about a core), looking at the queue
# every 2 s. `mce compute` runs its own, in its own processes.
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 2
concurrency:
  runs:
    max_concurrent_runs: 2
"""

LOCAL_LAUNCHER = """\
# Runs the daemon launches: the monitoring daemon fails those whose process is gone.
run_launcher:
  module: mce_dagster.instance.launcher
  class: MonitoredRunLauncher
"""

MONITORED_LAUNCHER = """\
# Dagster's default launcher (a run worker per run, from the code server) with a
# health check: the monitoring daemon fails a STARTED run whose worker process is
# gone (a reboot, an OOM kill of the code server with its workers), and a run that
# `mce` started in a process that died. Workers of code servers this deployment does
# not start (a `grpc_server` workspace entry) are not checked.
run_launcher:
  module: mce_dagster.instance.launcher
  class: MonitoredRunLauncher
"""

COMPOSE_LAUNCHER = """\
# The daemon asks the code location's gRPC server to start each run as a subprocess
# of its container: runs share the code location's image and environment.
run_launcher:
  module: dagster.core.launcher
  class: DefaultRunLauncher
"""

K8S_LAUNCHER = """\
run_launcher:
  module: dagster_k8s
  class: K8sRunLauncher
  config:
    job_namespace: mce
    load_incluster_config: true
    service_account_name: mce-dagster
    job_image: ghcr.io/example/mce-dagster:0.1.0
    image_pull_policy: IfNotPresent
    dagster_home: /opt/dagster/home
    instance_config_map: mce-dagster-instance
    # The Secret `mce-dagster-pg` holds DAGSTER_PG_PASSWORD; the run pod gets it as
    # that variable, as the webserver and the daemon do.
    postgres_password_secret: mce-dagster-pg
    # DAGSTER_PG_HOST/PORT/DB/USER, NEO4J_URI/USERNAME, RABBITMQ_URL, MCE_HOME (the
    # ConfigMap) and NEO4J_PASSWORD (the Secret): the run pod reaches the same
    # PostgreSQL and Neo4j as the daemon. The embedded FalkorDB is a server on a Unix
    # socket of one machine, so on Kubernetes the graph is Neo4j.
    env_config_maps:
      - mce-dagster-env
    env_secrets:
      - mce-dagster-neo4j
    # One transaction per event batch in the run pod, as everywhere else.
    env_vars:
      - DAGSTER_EVENT_BATCH_SIZE=1000
    # A run evaluates a batch of sessions in one process: size the pod for the batch.
    resources:
      requests:
        cpu: "1"
        memory: 1Gi
      limits:
        memory: 2Gi
    labels:
      app.kubernetes.io/part-of: mce-dagster
    fail_pod_on_run_failure: true
"""


def concurrency(max_runs: int) -> str:
    return f"""\
concurrency:
  runs:
    max_concurrent_runs: {max_runs}
  # Steps that use the same pool wait for a slot: the graph takes a bounded number of
  # writers, the judge a bounded number of concurrent LLM calls.
  pools:
    default_limit: 2
"""


LOCAL_MONITORING = """\
run_monitoring:
  enabled: true
  max_resume_run_attempts: 0
"""


def run_monitoring(start_timeout_seconds: int) -> str:
    return f"""\
run_monitoring:
  enabled: true
  start_timeout_seconds: {start_timeout_seconds}
  # A dead worker (or run pod) fails its run: its partitions show as failed, and
  # run_retries below launches it again from the failed steps. Resuming would need a
  # launcher that supports it.
  max_resume_run_attempts: 0
  poll_interval_seconds: 60
"""


RUN_RETRIES = """\
# A failed run (its worker killed, the graph gone longer than the steps' own retries
# wait) is launched again from its failed steps: steps that succeeded are not run
# again, so each (asset, session) is materialized once, twice only when the worker
# died between a step's materializations and its success. Inside a backfill the
# backfill waits for the retry. The daemon's EventLogConsumerDaemon does this.
run_retries:
  enabled: true
  max_retries: 3
"""

NO_TELEMETRY = """\
telemetry:
  enabled: false
"""

# -- the files ---------------------------------------------------------------------------

GENERATED = "# Written by `python -m mce_dagster.instance.dagster_yaml` from the sections there: edit those.\n"

LOCAL_HEADER = """\
{marker}, format 2.
# Delete the line above to keep your own edits: mce then leaves this file alone.
# For production settings see dagster.yaml at the root of the project.
"""

PRODUCTION_HEADER = """\
# Dagster instance settings for production. Copy this file into $DAGSTER_HOME,
# the folder the webserver and the daemon are started with. Credentials come
# from the environment. With no dagster.yaml at all, Dagster keeps a local
# SQLite instance under $DAGSTER_HOME; `mce` writes its own local dagster.yaml
# there (mce_dagster/instance/local.py) unless one is already there.
#
# Start the daemon, the webserver and any code server with
# DAGSTER_EVENT_BATCH_SIZE=1000 in their environment: run workers inherit it, and
# the event log below then writes a run's planned materializations and each
# asset's materializations of the run's partitions in one transaction per batch.
# Unset, events are written one by one (correct, about 40 times slower).
"""

COMPOSE_HEADER = """\
# Dagster instance of the docker-compose deployment (deploy/docker-compose.yaml):
# the webserver, the daemon and the code location's run workers all read it from
# $DAGSTER_HOME (/opt/dagster/home in the image). Credentials come from the environment.
# Every container sets DAGSTER_EVENT_BATCH_SIZE=1000 (run workers inherit it from the
# code location); unset, events are written one by one, about 40 times slower.
"""

K8S_HEADER = """\
# Dagster instance for Kubernetes: each run gets a Kubernetes Job of its own
# (dagster-k8s' K8sRunLauncher, `pip install 'mce-dagster[k8s]'`), built from the image
# of deploy/Dockerfile. The webserver and the daemon run in the cluster with this file
# as $DAGSTER_HOME/dagster.yaml, mounted from the ConfigMap `mce-dagster-instance`,
# which the run pods mount too. Storage is the PostgreSQL of deploy/dagster.yaml.
"""

#: The local instance `mce` writes, with {marker}, {runs}, {events}, {schedules} to fill in.
LOCAL = (LOCAL_HEADER, SQLITE_STORAGE, LOCAL_QUEUED_RUNS, LOCAL_LAUNCHER, LOCAL_MONITORING, NO_TELEMETRY)

#: The committed files, by their path in the repository.
FILES: dict[str, tuple[str, ...]] = {
    "dagster.yaml": (
        PRODUCTION_HEADER, GENERATED, POSTGRES_STORAGE, QUEUED_RUNS, MONITORED_LAUNCHER, concurrency(4),
        run_monitoring(180), RUN_RETRIES, NO_TELEMETRY,
    ),
    "deploy/dagster.yaml": (
        COMPOSE_HEADER, GENERATED, POSTGRES_STORAGE, QUEUED_RUNS, COMPOSE_LAUNCHER, concurrency(4),
        run_monitoring(180), RUN_RETRIES, NO_TELEMETRY,
    ),
    "deploy/k8s/dagster.yaml": (
        K8S_HEADER, GENERATED, POSTGRES_STORAGE, QUEUED_RUNS, K8S_LAUNCHER, run_monitoring(300), RUN_RETRIES,
        concurrency(8), NO_TELEMETRY,
    ),
}


def local_template() -> str:
    # The header and the storages run together, as the file has always been written.
    header, storage, *rest = LOCAL
    return header + storage + "".join(rest)


def render(path: str) -> str:
    """The committed file at `path` (a key of FILES): its sections, a blank line apart
    (the header and the generated note together)."""
    header, note, *sections = FILES[path]
    return header + note + "\n" + "\n".join(sections)


def stale(root: Path) -> list[str]:
    """The files under `root` that differ from what this module writes."""
    return [path for path in FILES if not (root / path).is_file() or (root / path).read_text() != render(path)]


def main(argv: list[str]) -> int:
    check = "--check" in argv
    root = Path(next((a for a in argv if not a.startswith("--")), ".")).resolve()
    if not (root / "deploy").is_dir():
        print(f"{root} is not the repository's root (no deploy/ folder)", file=sys.stderr)
        return 2
    differ = stale(root)
    if check:
        for path in differ:
            print(f"{path} differs from what mce_dagster.instance.dagster_yaml writes", file=sys.stderr)
        return 1 if differ else 0
    for path in differ:
        (root / path).write_text(render(path))
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
