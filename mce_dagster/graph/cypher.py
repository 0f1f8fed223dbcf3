"""The Cypher the project runs, in the subset that Neo4j 5 and FalkorDB share.

Labels, relationship types and property names come only from `core.ontology`;
every value is a parameter.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..core.models import MetricResultNode
from ..core.ontology import (
    CALL_LABELS,
    CHILD_REL,
    COMMON_PROPS,
    EXECUTION_LABELS,
    EXTRA_PROPS,
    NAMED_BY,
    Label,
    Rel,
)


def _projection(props: tuple[str, ...]) -> str:
    return "{" + ", ".join(f".{p}" for p in props) + "}"


# (label, property, unique): ids are unique across the graph (docs/graph.md); the rest
# are lookups. Neo4j enforces the unique ones as constraints (which are indexes
# too); FalkorDB's constraints take another syntax, so it gets plain indexes.
SCHEMA: tuple[tuple[Label, str, bool], ...] = (
    *((label, "id", True) for label in (*EXECUTION_LABELS, Label.SPAN, Label.STATE, Label.METRIC_RESULT)),
    *((label, "sessionId", False) for label in (*EXECUTION_LABELS, Label.SPAN, Label.STATE, Label.METRIC_RESULT)),
    *((label, "name", False) for label in (Label.AGENT, Label.TOOL, Label.LLM, Label.METRIC)),
)


def index_statements(dialect: str = "falkordb") -> list[str]:
    """The schema as statements for one backend (`falkordb` or `neo4j`)."""
    statements = []
    for label, prop, unique in SCHEMA:
        if dialect == "neo4j" and unique:
            statements.append(f"CREATE CONSTRAINT IF NOT EXISTS FOR (n:{label}) REQUIRE n.{prop} IS UNIQUE")
        elif dialect == "neo4j":
            statements.append(f"CREATE INDEX IF NOT EXISTS FOR (n:{label}) ON (n.{prop})")
        else:
            statements.append(f"CREATE INDEX FOR (n:{label}) ON (n.{prop})")
    return statements


# -- ingestion ----------------------------------------------------------------------

# Bookkeeping on ingested nodes: the digest of the row a span came from (and of
# all of a session's rows, on its Session), so a later ingest tells same from new.
INGEST_DIGEST = "ingestDigest"
# On each span node, the span as parsed (see ingest.spans.span_record), so that
# rows of its session arriving in a later call are mapped together with it; on the
# Session, the keys of the rows of it that were not placed.
INGEST_SPAN = "ingestSpan"
INGEST_REFUSED = "ingestRefused"
_SESSION_OWNED = (*CALL_LABELS, Label.SPAN)
_STATE_RELS = f"{Rel.HAS_INITIAL_STATE}|{Rel.HAS_FINAL_STATE}"
_EXECUTES = {Label.AGENT: Rel.EXECUTES_AGENT, Label.TOOL: Rel.EXECUTES_TOOL, Label.LLM: Rel.EXECUTES_LLM}

MERGE_AGENTS = f"UNWIND $agents AS r MERGE (:{Label.AGENT} {{name: r.name}})"
MERGE_TOOLS = (
    f"UNWIND $tools AS r MERGE (t:{Label.TOOL} {{name: r.name}}) "
    "SET t.description = coalesce(r.description, t.description), "
    "t.parameters = coalesce(r.parameters, t.parameters)"
)
MERGE_LLMS = (
    f"UNWIND $llms AS r MERGE (m:{Label.LLM} {{name: r.name}}) "
    "SET m.provider = coalesce(r.provider, m.provider)"
)


def nodes_param(label: Label) -> str:
    return f"n_{label}"


def executes_param(call: Label, structural: Label) -> str:
    return f"x_{call}_{structural}"


def states_param(call: Label, rel: Rel) -> str:
    return f"st_{call}_{rel}"


def links_param(source: Label, rel: Rel, target: Label) -> str:
    return f"l_{source}_{rel}_{target}"


def write_sessions(
    node_labels: Iterable[Label],
    executes: Iterable[tuple[Label, Label]],
    states: Iterable[tuple[Label, Rel]],
    links: Iterable[tuple[Label, Rel, Label]],
) -> str:
    """Sessions as ONE statement, so that each write is all or nothing on a store
    without multi-statement transactions (FalkorDB rolls a failed statement back).

    First it removes what the graph holds of the sessions (`$clear`): nothing,
    unless an older, multi-statement writer left nodes of them without their
    Session. Then nodes, structural nodes, states and links. Nodes are
    merged on (id, sessionId): a node is never shared with another session, even
    by two writers racing. Parameters: `$now`, `$sessions` and the `*_param`
    names of the sections given; sections run one after the other, each on the
    single row `WITH count(*)` leaves, so an empty one does not stop the rest.

    `$grown`: sessions the graph held, rewritten whole with more rows. Their nodes
    are removed and made anew, which drops the `measures` links of their results:
    each result is linked again to the call of its id and scope, and a result
    whose call the session no longer has (a MASCall that became a step of the
    call that arrived, a MASCall made while the real one was missing) is removed."""
    parts = _delete_parts("clear")
    for label in node_labels:
        parts.append(f"UNWIND ${nodes_param(label)} AS r MERGE (n:{label} {{id: r.id, sessionId: r.sessionId}}) SET n += r")
    parts.append(f"UNWIND $sessions AS r MERGE (n:{Label.SESSION} {{id: r.id}}) ON CREATE SET n.ingestedAt = $now SET n += r")
    parts.extend((MERGE_AGENTS, MERGE_TOOLS, MERGE_LLMS))
    for call, structural in executes:
        parts.append(
            f"UNWIND ${executes_param(call, structural)} AS r MATCH (c:{call} {{id: r.id, sessionId: r.sid}}) "
            f"MATCH (t:{structural} {{name: r.name}}) MERGE (c)-[:{_EXECUTES[structural]}]->(t)"
        )
    for call, rel in states:
        parts.append(
            f"UNWIND ${states_param(call, rel)} AS r MATCH (c:{call} {{id: r.id, sessionId: r.sid}}) "
            f"MERGE (st:{Label.STATE} {{id: r.stateId, sessionId: r.sid}}) SET st.content = r.content "
            f"MERGE (c)-[:{rel}]->(st)"
        )
    for source, rel, target in links:
        source_match = f"(a:{source} {{id: r.s}})" if source is Label.SESSION else f"(a:{source} {{id: r.s, sessionId: r.sid}})"
        parts.append(
            f"UNWIND ${links_param(source, rel, target)} AS r MATCH {source_match} "
            f"MATCH (b:{target} {{id: r.t, sessionId: r.sid}}) MERGE (a)-[:{rel}]->(b)"
        )
    for label in CALL_LABELS:
        parts.append(
            f"UNWIND $grown AS sid MATCH (x:{Label.METRIC_RESULT} {{sessionId: sid}}) "
            f"MATCH (e:{label} {{id: x.entityId, sessionId: sid}}) WHERE x.scope IN labels(e) MERGE (x)-[:{Rel.MEASURES}]->(e)"
        )
    parts.append(
        f"UNWIND $grown AS sid MATCH (x:{Label.METRIC_RESULT} {{sessionId: sid}}) "
        f"WHERE x.entityId <> sid AND NOT (x)-[:{Rel.MEASURES}]->() DETACH DELETE x"
    )
    return " WITH count(*) AS _ ".join(parts) + " RETURN count(*) AS written"


def _delete_parts(param: str) -> list[str]:
    parts = [
        f"UNWIND ${param} AS sid MATCH (n:{label} {{sessionId: sid}}) "
        f"OPTIONAL MATCH (n)-[:{_STATE_RELS}]->(st:{Label.STATE}) DETACH DELETE n, st"
        for label in _SESSION_OWNED
    ]
    parts.append(f"UNWIND ${param} AS sid MATCH (st:{Label.STATE} {{sessionId: sid}}) DETACH DELETE st")
    return parts


# A session, its calls, spans and states, and its metric results, in one statement.
DELETE_SESSIONS = " WITH count(*) AS _ ".join(
    [
        *_delete_parts("ids"),
        f"UNWIND $ids AS sid MATCH (x:{Label.METRIC_RESULT} {{sessionId: sid}}) DETACH DELETE x",
        f"UNWIND $ids AS sid MATCH (s:{Label.SESSION} {{id: sid}}) DETACH DELETE s",
    ]
) + " RETURN count(*) AS deleted"


def span_owners() -> str:
    """The sessions holding execution nodes with the given ids. Columns: id, session."""
    return " UNION ALL ".join(
        f"MATCH (n:{label}) WHERE n.id IN $ids RETURN n.id AS id, n.sessionId AS session" for label in _SESSION_OWNED
    )


def stored_span_digests() -> str:
    """Every span node of the given sessions with its row digest. Columns: session, id, digest."""
    return " UNION ALL ".join(
        f"MATCH (n:{label}) WHERE n.sessionId IN $ids RETURN n.sessionId AS session, n.id AS id, n.{INGEST_DIGEST} AS digest"
        for label in _SESSION_OWNED
    )


STORED_SESSIONS = (
    f"MATCH (s:{Label.SESSION}) WHERE s.id IN $ids "
    f"RETURN s.id AS id, s.ingestedAt AS ingestedAt, s.{INGEST_DIGEST} AS digest, s.{INGEST_REFUSED} AS refused"
)


def stored_spans() -> str:
    """Every span node of the given sessions, with its properties and the contents
    of its input and output states. Columns: session, props, input, output."""
    return " UNION ALL ".join(
        f"MATCH (n:{label}) WHERE n.sessionId IN $ids "
        f"OPTIONAL MATCH (n)-[:{Rel.HAS_INITIAL_STATE}]->(i:{Label.STATE}) "
        f"OPTIONAL MATCH (n)-[:{Rel.HAS_FINAL_STATE}]->(o:{Label.STATE}) "
        "RETURN n.sessionId AS session, properties(n) AS props, i.content AS input, o.content AS output"
        for label in _SESSION_OWNED
    )


def names_behind_calls() -> str:
    """The name (and an LLM's provider) on the structural node behind each call of
    the given sessions that does not carry its own, and the app of each Session
    without `appName`: the platform's graph names them there only. A separate
    statement, run only for sessions that need it, so that sessions this project
    ingested pay nothing for it. Columns: id, named, namedProvider."""
    parts = [
        f"MATCH (n:{Label.SESSION}) WHERE n.id IN $ids AND n.appName IS NULL "
        # Not only a MAS: the platform's writer files the target under whichever
        # label last took its id (an app named like one of its agents is an Agent).
        f"MATCH (n)-[:{Rel.EXECUTES_SESSION}]->(m) "
        "RETURN n.id AS id, m.id AS named, null AS namedProvider"
    ]
    for label, (prop, rel, structural) in NAMED_BY.items():
        provider = "x.provider" if label is Label.LLM_CALL else "null"
        missing = f"(n.{prop} IS NULL OR n.provider IS NULL)" if label is Label.LLM_CALL else f"n.{prop} IS NULL"
        parts.append(
            f"MATCH (n:{label}) WHERE n.sessionId IN $ids AND {missing} "
            f"MATCH (n)-[:{rel}]->(x:{structural}) "
            f"RETURN n.id AS id, x.name AS named, {provider} AS namedProvider"
        )
    return " UNION ALL ".join(parts)


def read_contexts() -> str:
    """Every execution node of the given sessions with the ids of its call parents,
    in one round trip. Columns: label, props, parents."""
    parts = [
        f"MATCH (n:{Label.SESSION}) WHERE n.id IN $ids "
        f"RETURN '{Label.SESSION}' AS label, n {_projection(COMMON_PROPS + EXTRA_PROPS[Label.SESSION])} AS props, "
        "[] AS parents"
    ]
    for label in CALL_LABELS:
        props = COMMON_PROPS + EXTRA_PROPS[label]
        parts.append(
            f"MATCH (n:{label}) WHERE n.sessionId IN $ids "
            f"OPTIONAL MATCH (p)-[:{CHILD_REL[label]}]->(n) "
            f"RETURN '{label}' AS label, n {_projection(props)} AS props, collect(p.id) AS parents"
        )
    parts.append(
        f"MATCH (n:{Label.SPAN}) WHERE n.sessionId IN $ids "
        f"RETURN '{Label.SPAN}' AS label, n {{.id, .sessionId, .name, .startTime, .endTime, .startTimeUnixNano, .endTimeUnixNano, .duration}} AS props, "
        "[] AS parents"
    )
    return " UNION ALL ".join(parts)


# The poll sensor's keyset page: sessions after the (ingestedAt, id) key, in that
# order, through the index below.
SESSIONS_INGESTED_AFTER = (
    f"MATCH (s:{Label.SESSION}) WHERE s.ingestedAt > $mark OR (s.ingestedAt = $mark AND s.id > $last) "
    "RETURN s.id AS id, s.ingestedAt AS at ORDER BY at, id LIMIT $limit"
)


def ingested_at_index(dialect: str) -> str:
    if dialect == "neo4j":
        return f"CREATE INDEX IF NOT EXISTS FOR (n:{Label.SESSION}) ON (n.ingestedAt)"
    return f"CREATE INDEX FOR (n:{Label.SESSION}) ON (n.ingestedAt)"


EXISTING_SESSIONS = f"MATCH (s:{Label.SESSION}) WHERE s.id IN $ids RETURN s.id AS id"
# Sessions by id with their app (the platform's graph names it on the MAS only).
SESSIONS_WITH_APP = (
    f"MATCH (s:{Label.SESSION}) WHERE s.id IN $ids "
    f"RETURN s.id AS id, coalesce(s.appName, [(s)-[:{Rel.EXECUTES_SESSION}]->(m) | m.id][0]) AS app"
)
# How many calls name each of the given session ids.
CALLS_OF_SESSIONS = " UNION ALL ".join(
    f"MATCH (n:{label}) WHERE n.sessionId IN $ids RETURN n.sessionId AS session, count(n) AS n" for label in CALL_LABELS
)
# Sessions another producer wrote (the platform's normalizer sets no ingestedAt),
# stamped with the time the engine first saw them, so that the poll sensor's
# keyset cursor on ingestedAt reaches them too.
STAMP_UNSEEN_SESSIONS = (
    f"MATCH (s:{Label.SESSION}) WHERE s.ingestedAt IS NULL WITH s LIMIT $limit "
    "SET s.ingestedAt = $now RETURN count(s) AS n"
)
# Calls that name a session the graph holds no Session node for (the platform's
# normalizer writes none for a trace with no agent span).
CALLS_WITHOUT_SESSION = " UNION ALL ".join(
    f"MATCH (n:{label}) WHERE n.sessionId IS NOT NULL OPTIONAL MATCH (s:{Label.SESSION} {{id: n.sessionId}}) "
    f"WITH n, s WHERE s IS NULL RETURN n.sessionId AS session, '{label}' AS label, count(n) AS n"
    for label in CALL_LABELS
)
LIST_SESSIONS = f"MATCH (s:{Label.SESSION}) RETURN s.id AS id ORDER BY s.startTime, s.id"
COUNT_SESSIONS = f"MATCH (s:{Label.SESSION}) RETURN count(s) AS n"

MERGE_METRICS = (
    f"UNWIND $rows AS r MERGE (m:{Label.METRIC} {{name: r.name, provider: r.provider}}) SET m += r"
)


def write_results(entity: Label) -> str:
    """One metric's results at one scope, in one statement (all rows or none). Rows
    whose entity is missing are not written; the count returned says how many were
    (one row back, not one per result: Neo4j streams every returned row)."""
    return (
        f"UNWIND $rows AS r "
        f"MATCH (e:{entity} {{id: r.entityId}}) "
        f"MATCH (m:{Label.METRIC} {{name: r.name, provider: r.provider}}) "
        f"MERGE (x:{Label.METRIC_RESULT} {{id: r.id}}) SET x += r "
        f"MERGE (x)-[:{Rel.OF_METRIC_TYPE}]->(m) "
        f"MERGE (x)-[:{Rel.MEASURES}]->(e) "
        "RETURN count(x) AS written"
    )


def create_results(entity: Label) -> str:
    """`write_results` for results the graph does not hold yet: `CREATE`, not
    `MERGE`, about half of Neo4j's work per row. Only where the graph enforces
    unique result ids (Neo4j's constraint), so that a result stored meanwhile
    fails the whole statement instead of being doubled; the caller then merges."""
    return (
        f"UNWIND $rows AS r "
        f"MATCH (e:{entity} {{id: r.entityId}}) "
        f"MATCH (m:{Label.METRIC} {{name: r.name, provider: r.provider}}) "
        f"CREATE (x:{Label.METRIC_RESULT})-[:{Rel.OF_METRIC_TYPE}]->(m) "
        f"CREATE (x)-[:{Rel.MEASURES}]->(e) "
        "SET x = r "
        "RETURN count(x) AS written"
    )


# Result properties whose values repeat across many results (a metric's name, a
# session's id, a run's id): FalkorDB's `intern()` keeps one copy of each value.
INTERNED_RESULT_PROPS = frozenset({"name", "provider", "scope", "sessionId", "runId", "evaluationModel", "evaluationMethod"})


def upsert_results(entity: Label, *, intern: bool) -> str:
    """`write_results` for FalkorDB, which runs one statement at a time: a result not
    stored yet is created with all its properties in its pattern, repeated strings
    through `intern()` when the server has it (a fifth of a result's memory); a
    stored one is updated. Same rows in, same `written` out."""
    props = ", ".join(
        f"{p}: intern(r.{p})" if intern and p in INTERNED_RESULT_PROPS else f"{p}: r.{p}" for p in MetricResultNode.model_fields
    )
    return (
        f"UNWIND $rows AS r "
        f"MATCH (e:{entity} {{id: r.entityId}}) "
        f"MATCH (m:{Label.METRIC} {{name: r.name, provider: r.provider}}) "
        f"OPTIONAL MATCH (stored:{Label.METRIC_RESULT} {{id: r.id}}) "
        "WITH r, e, m, stored "
        "FOREACH (_ IN CASE WHEN stored IS NULL THEN [1] ELSE [] END | "
        f"CREATE (x:{Label.METRIC_RESULT} {{{props}}})-[:{Rel.OF_METRIC_TYPE}]->(m) "
        f"CREATE (x)-[:{Rel.MEASURES}]->(e)) "
        "FOREACH (_ IN CASE WHEN stored IS NULL THEN [] ELSE [1] END | "
        f"SET stored += r MERGE (stored)-[:{Rel.OF_METRIC_TYPE}]->(m) MERGE (stored)-[:{Rel.MEASURES}]->(e)) "
        "RETURN count(r) AS written"
    )


RESULT_STORED = f"MATCH (x:{Label.METRIC_RESULT} {{id: $id}}) RETURN count(x) AS n"

#: Which of these result ids are stored and attached to their entity.
RESULTS_ATTACHED = (
    f"UNWIND $ids AS i MATCH (x:{Label.METRIC_RESULT} {{id: i}})-[:{Rel.MEASURES}]->() RETURN x.id AS id"
)


READ_RESULTS = (
    f"MATCH (x:{Label.METRIC_RESULT}) WHERE x.sessionId IN $ids "
    "RETURN properties(x) AS props ORDER BY x.sessionId, x.scope, x.name, x.entityId"
)

READ_RESULTS_FOR = (
    f"MATCH (x:{Label.METRIC_RESULT}) WHERE x.sessionId IN $ids AND x.name = $name "
    "AND x.provider = $provider AND x.scope = $scope AND x.metricVersion = $version "
    "RETURN properties(x) AS props"
)

COUNT_RESULTS = f"MATCH (x:{Label.METRIC_RESULT}) RETURN count(x) AS n"


def select_sessions(*, ids: bool = False, app: bool = False, since: bool = False, until: bool = False, evaluated: bool | None = None) -> str:
    """Sessions by the filters given, as parameters: `$ids`, `$app`, `$since` and
    `$until` (session start, Unix seconds, half-open); `evaluated` keeps those
    holding results (True) or none (False). Columns: id, app, startTime, endTime,
    results (how many results the session holds), by start time then id."""
    conditions = [c for c, given in (
        ("s.id IN $ids", ids),
        ("s.appName = $app", app),
        ("s.startTime >= $since", since),
        ("s.startTime < $until", until),
    ) if given]
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    held = {None: "", True: " WHERE results > 0", False: " WHERE results = 0"}[evaluated]
    return (
        f"MATCH (s:{Label.SESSION}){where} "
        f"OPTIONAL MATCH (x:{Label.METRIC_RESULT} {{sessionId: s.id}}) "
        f"WITH s, count(x) AS results{held} "
        "RETURN s.id AS id, s.appName AS app, s.startTime AS startTime, s.endTime AS endTime, results "
        "ORDER BY s.startTime, s.id"
    )


def select_results(*, keys: bool = False, scopes: bool = False) -> str:
    """The results of the sessions `$ids`, narrowed to the metrics `$keys`
    (`Scope/provider.Name`) or the scopes `$scopes` when given; in the order of
    READ_RESULTS, ties by id. Column: props."""
    conditions = ["x.sessionId IN $ids"]
    if keys:
        conditions.append("(x.scope + '/' + x.provider + '.' + x.name) IN $keys")
    if scopes:
        conditions.append("x.scope IN $scopes")
    return (
        f"MATCH (x:{Label.METRIC_RESULT}) WHERE {' AND '.join(conditions)} "
        "RETURN properties(x) AS props ORDER BY x.sessionId, x.scope, x.name, x.entityId, x.id"
    )

DELETE_SESSION_RESULTS = (
    f"MATCH (x:{Label.METRIC_RESULT}) WHERE x.sessionId IN $ids DETACH DELETE x"
)

LABEL_PROPERTY_KEYS = "MATCH (n) WHERE $label IN labels(n) WITH n LIMIT 200 UNWIND keys(n) AS k RETURN DISTINCT k"


def linked_property_keys(label: Label) -> str | None:
    """The properties a call of `label` (or a Session) has through the node behind
    it, as read_contexts resolves them; columns: k. None when it has no such node."""
    if label is Label.SESSION:
        return (
            f"MATCH (n:{Label.SESSION})-[:{Rel.EXECUTES_SESSION}]->(m) WITH m LIMIT 200 "
            "WITH count(m.id) AS apps RETURN CASE WHEN apps > 0 THEN 'appName' END AS k"
        )
    if label not in NAMED_BY:
        return None
    prop, rel, structural = NAMED_BY[label]
    provider = "CASE WHEN count(x.provider) > 0 AND max(size(x.provider)) > 0 THEN ['provider'] ELSE [] END" if label is Label.LLM_CALL else "[]"
    return (
        f"MATCH (n:{label})-[:{rel}]->(x:{structural}) WITH x LIMIT 200 "
        f"WITH CASE WHEN count(x.name) > 0 THEN ['{prop}'] ELSE [] END + {provider} AS ks UNWIND ks AS k RETURN k"
    )


def read_texts() -> str:
    """The text of every call of the given sessions, for judged metrics only: the
    contents of its input and output `State`s, an LLM call's message lists, a tool
    call's definition. Columns: id, session, input, output, inputMessages,
    outputMessages, toolDescription, toolParameters."""
    parts = []
    for label in CALL_LABELS:
        messages = "n.inputMessages AS inputMessages, n.outputMessages AS outputMessages" if label is Label.LLM_CALL else "null AS inputMessages, null AS outputMessages"
        tool = ""
        tool_columns = "null AS toolDescription, null AS toolParameters"
        if label is Label.TOOL_CALL:
            tool = f"OPTIONAL MATCH (n)-[:{Rel.EXECUTES_TOOL}]->(d:{Label.TOOL}) "
            tool_columns = "d.description AS toolDescription, d.parameters AS toolParameters"
        parts.append(
            f"MATCH (n:{label}) WHERE n.sessionId IN $ids "
            f"OPTIONAL MATCH (n)-[:{Rel.HAS_INITIAL_STATE}]->(i:{Label.STATE}) "
            f"OPTIONAL MATCH (n)-[:{Rel.HAS_FINAL_STATE}]->(o:{Label.STATE}) "
            f"{tool}"
            f"RETURN n.id AS id, n.sessionId AS session, i.content AS input, o.content AS output, {messages}, {tool_columns}"
        )
    return " UNION ALL ".join(parts)


# -- queries over results (mce serve) ------------------------------------------------

# What a result can be cut or filtered by, as an expression over the result's session
# `s` and, for the call dimensions, the entity `e` it measures (a node of the
# result's scope). Days are UTC days since the epoch; months are merged from days.
_DAY = "toInteger(floor(s.startTime / 86400.0))"
RESULT_DIMENSIONS: dict[str, tuple[Label, str]] = {
    "app": (Label.SESSION, "s.appName"),
    "session": (Label.SESSION, "s.id"),
    "day": (Label.SESSION, _DAY),
    "month": (Label.SESSION, _DAY),
    "agent": (Label.AGENT_CALL, "e.agentName"),
    "model": (Label.LLM_CALL, "e.modelName"),
    "tool": (Label.TOOL_CALL, "e.toolName"),
}


def rollup_results(
    scope: Label,
    by: str | None = None,
    *,
    session: bool = False,
    app: bool = False,
    agent: bool = False,
    since: bool = False,
    until: bool = False,
) -> str:
    """One metric's results at one scope and version, grouped by the cut `by` (one
    group without), with the sums, counts and extremes every roll-up is made of. The
    filters given are parameters: `$session_id`, `$app`, `$agent`, `$since` and
    `$until` (session start, Unix seconds, half-open). Columns: key, n, total, lo, hi,
    num, den, ratios (results that carry a denominator), first, last."""
    needs_entity = (by is not None and RESULT_DIMENSIONS[by][0] is not Label.SESSION) or agent
    where = []
    if session:
        where.append("x.sessionId = $session_id")
    parts = [
        f"MATCH (x:{Label.METRIC_RESULT}) WHERE x.name = $name AND x.provider = $provider "
        "AND x.scope = $scope AND x.metricVersion = $version" + "".join(f" AND {w}" for w in where),
        f"MATCH (s:{Label.SESSION} {{id: x.sessionId}})",
    ]
    if needs_entity:
        parts.append(f"MATCH (e:{scope} {{id: x.entityId}})")
    conditions = []
    if app:
        conditions.append("s.appName = $app")
    if agent:
        conditions.append("e.agentName = $agent")
    if since:
        conditions.append("s.startTime >= $since")
    if until:
        conditions.append("s.startTime < $until")
    if conditions:
        parts.append("WHERE " + " AND ".join(conditions))
    key = RESULT_DIMENSIONS[by][1] if by else "null"
    parts.append(
        f"RETURN {key} AS key, count(x) AS n, sum(x.result) AS total, min(x.result) AS lo, max(x.result) AS hi, "
        "sum(x.numerator) AS num, sum(x.denominator) AS den, count(x.denominator) AS ratios, "
        "min(s.startTime) AS first, max(s.startTime) AS last ORDER BY key"
    )
    return " ".join(parts)


NEWEST_EVALUATED = (
    f"MATCH (x:{Label.METRIC_RESULT}) WHERE x.name = $name AND x.provider = $provider "
    "AND x.scope = $scope AND x.metricVersion = $version "
    f"MATCH (s:{Label.SESSION} {{id: x.sessionId}}) RETURN max(s.startTime) AS newest, count(DISTINCT s.id) AS sessions"
)

# The names an answer may tie a number to. Columns: kind, name.
RESULT_VOCABULARY = " UNION ALL ".join(
    (
        f"MATCH (n:{Label.AGENT}) RETURN 'agent' AS kind, n.name AS name",
        f"MATCH (n:{Label.TOOL}) RETURN 'tool' AS kind, n.name AS name",
        f"MATCH (n:{Label.LLM}) RETURN 'model' AS kind, n.name AS name",
        f"MATCH (s:{Label.SESSION}) WHERE s.appName IS NOT NULL RETURN DISTINCT 'app' AS kind, s.appName AS name",
    )
)


# -- population metrics ----------------------------------------------------------------

# Every session with its app and the digest of the rows it was ingested from (its
# ingestion time where an older ingest left no digest): a changed digest is a
# session to count again. Columns: id, app, digest.
SESSION_DIGESTS = (
    f"MATCH (s:{Label.SESSION}) "
    f"RETURN s.id AS id, s.appName AS app, coalesce(s.{INGEST_DIGEST}, toString(s.ingestedAt), '') AS digest"
)

READ_POPULATION_STATES = (
    f"MATCH (p:{Label.POPULATION_STATE}) WHERE p.name = $name AND p.provider = $provider "
    "AND p.metricVersion = $version RETURN p.app AS app, p.state AS state"
)

# A population metric's states and results in one statement (all or nothing): the
# state of each app, its result (no `measures` link: there is no App node), and the
# removal of results of apps where the metric no longer applies.
WRITE_POPULATION = " WITH count(*) AS _ ".join(
    (
        f"UNWIND $metrics AS r MERGE (m:{Label.METRIC} {{name: r.name, provider: r.provider}}) SET m += r",
        f"UNWIND $states AS r MERGE (p:{Label.POPULATION_STATE} {{id: r.id}}) SET p += r",
        f"UNWIND $rows AS r MATCH (m:{Label.METRIC} {{name: r.name, provider: r.provider}}) "
        f"MERGE (x:{Label.METRIC_RESULT} {{id: r.id}}) SET x += r MERGE (x)-[:{Rel.OF_METRIC_TYPE}]->(m)",
        f"UNWIND $stale AS rid MATCH (x:{Label.METRIC_RESULT} {{id: rid}}) DETACH DELETE x",
    )
) + " RETURN count(*) AS written"
