"""Neo4j 5 through the official driver: the production backend.

Each `write` is one managed transaction, so a batch lands whole or not at all, and
the driver retries it on transient errors (a leader switch, a deadlock, a dropped
connection) within `max_transaction_retry_time`. Reads are auto-commit queries.
The driver is imported here only, so nothing else pays for it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import neo4j
from neo4j.exceptions import (
    ClientError,
    ConnectionAcquisitionTimeoutError,
    ConstraintError,
    IncompleteCommit,
    Neo4jError,
    ServiceUnavailable,
    SessionExpired,
    TransientError,
)

from ..core.ontology import Label
from ..core.storable import escaped
from ..errors import ConfigurationError, GraphUnavailableError, ServiceError
from ..settings import masked_url, redact
from .store import DuplicateIdError

log = logging.getLogger(__name__)
_REPORTED: set[tuple[str, str]] = set()

# What a server that is down or a connection that dropped raises.
_UNREACHABLE = (ServiceUnavailable, SessionExpired, ConnectionAcquisitionTimeoutError, OSError)


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain(value: Any) -> Any:
    """Driver values (nodes, temporal types) as the plain values FalkorDB returns."""
    if type(value) in _SCALARS:  # nearly every value read: one lookup, not three isinstance
        return value
    if isinstance(value, (neo4j.graph.Node, neo4j.graph.Relationship)):
        return dict(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class Neo4jBackend:
    name = "neo4j"
    # Ids are unique by constraint (cypher.SCHEMA): a duplicate fails its transaction.
    enforces_unique_ids = True
    # `Label.property` -> why its uniqueness constraint is not in place (ensure_indexes).
    schema_problems: dict[str, str] = {}

    def __init__(self, uri: str, user: str, password: str, database: str | None = None, *, retry_time_s: float = 30.0):
        # Every message names the server by this: a URI may carry a password.
        self.uri = masked_url(uri)
        self._secrets = (uri, password)
        self.database = database or None
        try:
            self._driver = neo4j.GraphDatabase.driver(
                uri,
                auth=(user, password),
                max_transaction_retry_time=retry_time_s,
                connection_acquisition_timeout=30.0,
                # "property key does not exist" warnings, for optional properties no node has yet
                notifications_min_severity="OFF",
            )
        except (neo4j.exceptions.ConfigurationError, ValueError) as exc:
            # The driver quotes the whole URI, and takes no user info in it.
            hint = " (give the user and password as NEO4J_USERNAME and NEO4J_PASSWORD)" if self.uri != uri else ""
            said = redact(str(exc), also=self._secrets).strip().rstrip(".")
            raise ConfigurationError(f"NEO4J_URI {self.uri} is refused by the Neo4j driver: {said}{hint}") from None
        try:
            self._driver.verify_connectivity()
        except _UNREACHABLE as exc:
            self._driver.close()
            raise GraphUnavailableError(f"the graph is unreachable: Neo4j at {self.uri} did not answer ({_cause(exc, self._secrets)})") from None
        except Neo4jError as exc:  # authentication, an unknown database
            self._driver.close()
            raise ServiceError(f"Neo4j at {self.uri} refused the connection: {redact(exc.message or str(exc), also=self._secrets)}") from None

    def _session(self) -> neo4j.Session:
        return self._driver.session(database=self.database)

    def query(self, statement: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        # A managed transaction too, so that reads are retried on transient errors.
        return self.write([(statement, params or {})])[0]

    def write(self, statements: Sequence[tuple[str, Mapping[str, Any]]]) -> list[list[dict[str, Any]]]:
        def work(tx: neo4j.ManagedTransaction) -> list[list[dict[str, Any]]]:
            return [[{k: _plain(v) for k, v in r.items()} for r in tx.run(s, escaped(dict(p)))] for s, p in statements]

        try:
            with self._session() as session:
                return session.execute_write(work)
        except ConstraintError as exc:
            raise DuplicateIdError(exc.message or str(exc)) from None
        except (*_UNREACHABLE, TransientError) as exc:
            raise self._unavailable(exc) from None

    def _unavailable(self, exc: Exception) -> GraphUnavailableError:
        """The error a caller sees once the driver's own retries are spent."""
        if isinstance(exc, IncompleteCommit):
            # The commit may have landed: every write of the project may be repeated (a
            # MERGE, or a CREATE of unique ids that then fails and is merged instead).
            written = "the connection dropped during the commit, which may or may not have been applied"
        else:
            written = "nothing of this transaction was written"
        if isinstance(exc, TransientError):
            return GraphUnavailableError(f"Neo4j at {self.uri} kept refusing the transaction as transient ({written}): {_cause(exc, self._secrets)}")
        return GraphUnavailableError(f"the graph is unreachable: Neo4j at {self.uri} did not answer ({written}): {_cause(exc, self._secrets)}")

    def ensure_indexes(self, statements: Sequence[str]) -> None:
        """Create the schema, then read back which uniqueness constraints hold
        (`SHOW CONSTRAINTS`): one that could not be created (the platform's writer
        makes a plain index on `<label>.id`, which blocks it) is reported in
        `schema_problems`, and results are then written by merging, which is safe
        without it."""
        problems: dict[str, str] = {}
        try:
            with self._session() as session:
                for statement in statements:
                    try:
                        session.run(statement).consume()
                    except ClientError as exc:
                        if "EquivalentSchemaRule" in (exc.code or ""):
                            continue  # the same index or constraint, under another name
                        if "CONSTRAINT" not in statement:
                            if "already exists" in (exc.message or ""):
                                continue
                            raise
                        problems[_constrained(statement)] = f"{exc.code}: {(exc.message or '').splitlines()[0][:200]}"
                held = {
                    (r["labelsOrTypes"][0], r["properties"][0])
                    for r in session.run("SHOW CONSTRAINTS YIELD type, labelsOrTypes, properties").data()
                    if r["type"] in ("UNIQUENESS", "NODE_KEY", "NODE_PROPERTY_UNIQUENESS") and r["labelsOrTypes"] and r["properties"]
                }
        except _UNREACHABLE as exc:
            raise self._unavailable(exc) from None
        for statement in statements:
            if "CONSTRAINT" in statement:
                target = _constrained(statement)
                if tuple(target.split(".", 1)) not in held:
                    problems.setdefault(target, "not in SHOW CONSTRAINTS after it was created")
        self.schema_problems = problems
        fresh = sorted(t for t in problems if (self.uri, t) not in _REPORTED)
        if fresh:  # once per process, not at every open
            _REPORTED.update((self.uri, t) for t in fresh)
            reasons = sorted({problems[t] for t in fresh})
            log.warning(
                "Neo4j: no uniqueness constraint on %s, so ids there are not enforced unique (%s%s)",
                ", ".join(fresh), reasons[0], f"; and {len(reasons) - 1} other reason(s)" if len(reasons) > 1 else "",
            )
        # Results are created only where the graph refuses a second one.
        self.enforces_unique_ids = f"{Label.METRIC_RESULT}.id" not in problems

    def close(self) -> None:
        self._driver.close()


def _constrained(statement: str) -> str:
    """`Label.property` of a `CREATE CONSTRAINT ... FOR (n:Label) REQUIRE n.property IS UNIQUE`."""
    label = statement.split("(n:", 1)[1].split(")", 1)[0]
    prop = statement.split("REQUIRE n.", 1)[1].split(" ", 1)[0]
    return f"{label}.{prop}"


def _cause(exc: Exception, secrets: tuple[str, ...]) -> str:
    """The driver's own words, with any secret it quotes (the URI's password) masked."""
    text = redact(str(exc).strip(), also=secrets) or type(exc).__name__
    return text if text.startswith(type(exc).__name__) else f"{type(exc).__name__}: {text}"
