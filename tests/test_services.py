"""The real services `make services` starts (Neo4j, RabbitMQ, PostgreSQL), through the
variables it exports. Each test skips, with the reason, when its variables are absent outside
CI, and fails in CI (`.ci/run` evaluates `make -s services` before the tests)."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
import uuid

import pytest

import conftest
from conftest import REPO, require

SERVICES_SH = REPO / "services" / "services.sh"
PROBE = REPO / "services" / "probe.py"

NEO4J_VARS = ("NEO4J_URI", "NEO4J_USERNAME", "NEO4J_PASSWORD")
RABBITMQ_VARS = ("RABBITMQ_URL",)
PG_VARS = ("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_DB", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD")

pytestmark = pytest.mark.service


def variable(name: str) -> str | None:
    # conftest may take the backend-selecting variables (NEO4J_URI) out of os.environ, so
    # that other tests stay on the embedded graph, and keep them in NEO4J_ENV.
    return getattr(conftest, "NEO4J_ENV", {}).get(name) or os.environ.get(name)


def needs(*names: str) -> dict[str, str]:
    missing = [n for n in names if not variable(n)]
    require(not missing, f"{', '.join(missing)} not set: run eval \"$(make -s services)\" first")
    return {n: variable(n) for n in names}


def test_neo4j_writes_and_reads_in_transactions():
    from neo4j import GraphDatabase

    env = needs(*NEO4J_VARS)
    token = uuid.uuid4().hex
    with GraphDatabase.driver(env["NEO4J_URI"], auth=(env["NEO4J_USERNAME"], env["NEO4J_PASSWORD"])) as driver:
        driver.verify_connectivity()
        with driver.session() as session:
            with session.begin_transaction() as tx:
                tx.run("CREATE (:MCEServicesTest {token: $token, n: 1})", token=token).consume()
                # the transaction sees its own write before the commit
                assert tx.run("MATCH (t:MCEServicesTest {token: $token}) RETURN count(t) AS c",
                              token=token).single()["c"] == 1
                tx.commit()
            try:
                n = session.execute_read(
                    lambda tx: tx.run("MATCH (t:MCEServicesTest {token: $token}) RETURN t.n AS n",
                                      token=token).single()["n"]
                )
                assert n == 1
            finally:
                session.execute_write(
                    lambda tx: tx.run("MATCH (t:MCEServicesTest {token: $token}) DELETE t", token=token).consume()
                )
            left = session.execute_read(
                lambda tx: tx.run("MATCH (t:MCEServicesTest {token: $token}) RETURN count(t) AS c",
                                  token=token).single()["c"]
            )
            assert left == 0


def test_rabbitmq_durable_queue_publish_get_ack():
    import pika

    env = needs(*RABBITMQ_VARS)
    params = pika.URLParameters(env["RABBITMQ_URL"])
    params.socket_timeout = 10
    params.blocked_connection_timeout = 10
    queue = f"mce.test.services.{uuid.uuid4().hex}"
    body = b'{"session_id": "test-services"}'
    connection = pika.BlockingConnection(params)
    try:
        channel = connection.channel()
        channel.confirm_delivery()  # basic_publish returns once the broker has the message
        assert channel.queue_declare(queue, durable=True).method.queue == queue
        try:
            channel.basic_publish(
                "", queue, body,
                properties=pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent,
                                                content_type="application/json"),
                mandatory=True,
            )
            method, properties, got = channel.basic_get(queue, auto_ack=False)
            assert got == body and properties.delivery_mode == 2 and not method.redelivered
            channel.basic_ack(method.delivery_tag)
            assert channel.queue_declare(queue, durable=True, passive=True).method.message_count == 0
        finally:
            channel.queue_delete(queue)
    finally:
        connection.close()


def test_postgres_table_in_the_dagster_database():
    import psycopg2

    env = needs(*PG_VARS)
    table = f"mce_services_test_{uuid.uuid4().hex[:12]}"
    conn = psycopg2.connect(
        host=env["DAGSTER_PG_HOST"], port=int(env["DAGSTER_PG_PORT"]), dbname=env["DAGSTER_PG_DB"],
        user=env["DAGSTER_PG_USER"], password=env["DAGSTER_PG_PASSWORD"], connect_timeout=10,
    )
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SELECT current_database(), current_user")
            assert cur.fetchone() == (env["DAGSTER_PG_DB"], env["DAGSTER_PG_USER"])
            cur.execute(f"CREATE TABLE {table} (id integer PRIMARY KEY, note text)")
            cur.execute(f"INSERT INTO {table} VALUES (1, 'services')")
            cur.execute(f"SELECT note FROM {table} WHERE id = 1")
            assert cur.fetchone() == ("services",)
        with conn, conn.cursor() as cur:
            cur.execute(f"DROP TABLE {table}")
            cur.execute("SELECT to_regclass(%s)", (table,))
            assert cur.fetchone() == (None,)
    finally:
        conn.close()


def parse_exports(stdout: str) -> dict[str, str]:
    found = {}
    for line in stdout.splitlines():
        assert re.fullmatch(r"export [A-Z_][A-Z0-9_]*=\S*", line), f"not an export line: {line!r}"
        [assignment] = shlex.split(line[len("export "):])
        name, _, value = assignment.partition("=")
        found[name] = value
    return found


def status() -> dict[str, str]:
    done = subprocess.run(["bash", str(SERVICES_SH), "status"], capture_output=True, text=True, timeout=60)
    return {line.split()[0]: line for line in done.stdout.splitlines()}


def test_second_make_services_prints_the_same_exports_and_starts_nothing():
    env = needs(*NEO4J_VARS, *RABBITMQ_VARS, *PG_VARS)
    before = status()
    require(all(line.endswith(" up") for line in before.values()) and len(before) == 3,
            f"the services of this checkout are not all up: {sorted(before.values())}")
    t0 = time.monotonic()
    done = subprocess.run(["make", "-s", "services"], cwd=REPO, capture_output=True, text=True, timeout=300)
    elapsed = time.monotonic() - t0
    assert done.returncode == 0, done.stderr[-3000:]
    exports = parse_exports(done.stdout)
    assert set(exports) >= set(env)
    assert {name: exports[name] for name in env} == env
    assert "started" not in done.stderr, done.stderr
    assert status() == before  # the same pids, all up
    assert elapsed < 20, f"an idempotent make services took {elapsed:.1f} s"


def listening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock


@pytest.mark.parametrize("service, port_variable", [("neo4j", "MCE_NEO4J_PORT"), ("rabbitmq", "MCE_RABBITMQ_PORT")])
def test_a_port_taken_by_a_foreign_process_is_a_clear_error(tmp_path, service, port_variable):
    holder = listening_socket()
    port = holder.getsockname()[1]
    try:
        env = {**os.environ, "MCE_SERVICES": service, port_variable: str(port), "MCE_SERVICES_DIR": str(tmp_path)}
        done = subprocess.run(["bash", str(SERVICES_SH), "up"], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 1
        assert done.stdout == ""  # nothing for eval to pick up
        assert f"port {port}" in done.stderr and "taken by something this checkout did not start" in done.stderr
        assert port_variable in done.stderr
        assert f"pid {os.getpid()}" in done.stderr or "pid ?" in done.stderr
        # and the holder was left alone
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        holder.close()


@pytest.mark.parametrize("kind", ["bolt", "amqp"])
def test_the_probe_checks_the_credentials(kind):
    if kind == "bolt":
        env = needs(*NEO4J_VARS)
        host, port = re.fullmatch(r"bolt://([^:/]+):(\d+)", env["NEO4J_URI"]).groups()
        good = [kind, host, port, env["NEO4J_USERNAME"], env["NEO4J_PASSWORD"]]
        bad = [kind, host, port, env["NEO4J_USERNAME"], env["NEO4J_PASSWORD"] + "-wrong"]
    else:
        env = needs(*RABBITMQ_VARS)
        host, port = re.fullmatch(r"amqp://[^@]+@([^:/]+):(\d+)/.*", env["RABBITMQ_URL"]).groups()
        good = [kind, host, port, "guest", "guest", "/"]
        bad = [kind, host, port, "guest", "not-the-password", "/"]
    run = lambda args: subprocess.run([sys.executable, str(PROBE), *args], capture_output=True, text=True, timeout=30)
    wrong = run(bad)
    assert wrong.returncode == 1 and wrong.stderr
    right = run(good)  # after the failure: a good login also resets Neo4j's failed-attempt count
    assert right.returncode == 0, right.stderr
