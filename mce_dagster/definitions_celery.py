"""The code location with the evaluation's steps on Celery workers (dagster-celery,
`pip install 'mce-dagster[celery]'`): `dagster api grpc -m mce_dagster.definitions_celery`.

The same assets, sensors and resources as mce_dagster.definitions; the evaluate job,
and the runs the sensors request, hand each step (one metric over the run's whole
batch of sessions) to a worker through the RabbitMQ of RABBITMQ_URL. Workers read the
same settings from deploy/celery.yaml:

    dagster-celery worker start -A dagster_celery.app -y deploy/celery.yaml

Steps pass nothing through memory: each reads what it depends on from the graph, so
workers need the graph of the code location (NEO4J_URI, or the embedded server of the
same MCE_HOME on the same host) and nothing else. The instance is the run's own
(PostgreSQL, or SQLite on a shared disk), passed to the workers with each step.
"""

from __future__ import annotations

import dagster as dg
from dagster_celery import celery_executor

from .defs.jobs import evaluate_job
from .definitions import build_definitions, runtime
from .evaluation import enabled
from .files import keep_private

# Celery workers load this module with its steps (mce_dagster.definitions does too: said here as well).
keep_private()

#: deploy/celery.yaml's `execution.config`, which the workers are started with.
CELERY_CONFIG = {
    "broker": {"env": "RABBITMQ_URL"},
    "backend": "rpc://",
    "config_source": {"task_acks_late": True, "worker_prefetch_multiplier": 1},
}

celery = celery_executor.configured(CELERY_CONFIG, name="celery")


def build_celery_definitions() -> dg.Definitions:
    catalog, config = runtime()
    base = build_definitions(catalog, config)
    return dg.Definitions(
        assets=base.assets,
        asset_checks=base.asset_checks,
        jobs=[evaluate_job(enabled(config), executor_def=celery)],
        sensors=base.sensors,
        schedules=base.schedules,
        resources=base.resources,
        executor=celery,
    )


defs = build_celery_definitions()
