"""The PostgreSQL of `make services` (DAGSTER_PG_*), for the benchmarks that make
schemas of their own in it."""

from __future__ import annotations

import os


def connect():
    """An autocommit psycopg2 connection to DAGSTER_PG_*."""
    import psycopg2

    env = os.environ
    conn = psycopg2.connect(
        host=env["DAGSTER_PG_HOST"], port=env["DAGSTER_PG_PORT"], dbname=env["DAGSTER_PG_DB"],
        user=env["DAGSTER_PG_USER"], password=env["DAGSTER_PG_PASSWORD"], connect_timeout=5,
    )
    conn.autocommit = True
    return conn
