"""The Cypher the project runs, in the subset that Neo4j 5 and FalkorDB share.

Labels, relationship types and property names come only from `core.ontology`;
every value is a parameter.
"""

from __future__ import annotations

from ..core.ontology import (
    CALL_LABELS,
    CHILD_REL,
    COMMON_PROPS,
    EXECUTION_LABELS,
    EXTRA_PROPS,
    Label,
    Rel,
)


def _projection(props: tuple[str, ...]) -> str:
    return "{" + ", ".join(f".{p}" for p in props) + "}"


def index_statements() -> list[str]:
    statements = []
    for label in (*EXECUTION_LABELS, Label.SPAN):
        statements.append(f"CREATE INDEX FOR (n:{label}) ON (n.id)")
        statements.append(f"CREATE INDEX FOR (n:{label}) ON (n.sessionId)")
    for label in (Label.AGENT, Label.TOOL, Label.LLM, Label.METRIC):
        statements.append(f"CREATE INDEX FOR (n:{label}) ON (n.name)")
    statements.append(f"CREATE INDEX FOR (n:{Label.STATE}) ON (n.id)")
    statements.append(f"CREATE INDEX FOR (n:{Label.METRIC_RESULT}) ON (n.id)")
    statements.append(f"CREATE INDEX FOR (n:{Label.METRIC_RESULT}) ON (n.sessionId)")
    return statements


def merge_nodes(label: Label) -> str:
    if label is Label.SESSION:
        # ingestedAt is set once, so that ingesting the same file twice leaves the same graph.
        return (
            f"UNWIND $rows AS r MERGE (n:{label} {{id: r.id}}) "
            "ON CREATE SET n.ingestedAt = $now SET n += r"
        )
    return f"UNWIND $rows AS r MERGE (n:{label} {{id: r.id}}) SET n += r"


def merge_links(source: Label, rel: Rel, target: Label) -> str:
    return (
        f"UNWIND $rows AS r MATCH (a:{source} {{id: r.s}}) MATCH (b:{target} {{id: r.t}}) "
        f"MERGE (a)-[:{rel}]->(b)"
    )


MERGE_AGENTS = f"UNWIND $rows AS r MERGE (:{Label.AGENT} {{name: r.name}})"
MERGE_TOOLS = (
    f"UNWIND $rows AS r MERGE (t:{Label.TOOL} {{name: r.name}}) "
    "SET t.description = coalesce(r.description, t.description), "
    "t.parameters = coalesce(r.parameters, t.parameters)"
)
MERGE_LLMS = (
    f"UNWIND $rows AS r MERGE (m:{Label.LLM} {{name: r.name}}) "
    "SET m.provider = coalesce(r.provider, m.provider)"
)

_EXECUTES = {Label.AGENT: Rel.EXECUTES_AGENT, Label.TOOL: Rel.EXECUTES_TOOL, Label.LLM: Rel.EXECUTES_LLM}


def merge_executes(call: Label, structural: Label) -> str:
    return (
        f"UNWIND $rows AS r MATCH (c:{call} {{id: r.id}}) MATCH (s:{structural} {{name: r.name}}) "
        f"MERGE (c)-[:{_EXECUTES[structural]}]->(s)"
    )


def merge_states(call: Label, rel: Rel) -> str:
    return (
        f"UNWIND $rows AS r MATCH (c:{call} {{id: r.id}}) "
        f"MERGE (s:{Label.STATE} {{id: r.sid}}) SET s.content = r.content "
        f"MERGE (c)-[:{rel}]->(s)"
    )


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


EXISTING_SESSIONS = f"MATCH (s:{Label.SESSION}) WHERE s.id IN $ids RETURN s.id AS id"
LIST_SESSIONS = f"MATCH (s:{Label.SESSION}) RETURN s.id AS id ORDER BY s.startTime, s.id"
COUNT_SESSIONS = f"MATCH (s:{Label.SESSION}) RETURN count(s) AS n"

MERGE_METRICS = (
    f"UNWIND $rows AS r MERGE (m:{Label.METRIC} {{name: r.name, provider: r.provider}}) SET m += r"
)


def write_results(entity: Label) -> str:
    """One metric's results at one scope, in one statement (all rows or none). Rows
    whose entity is missing are not written; the returned ids say which were."""
    return (
        f"UNWIND $rows AS r "
        f"MATCH (e:{entity} {{id: r.entityId}}) "
        f"MATCH (m:{Label.METRIC} {{name: r.name, provider: r.provider}}) "
        f"MERGE (x:{Label.METRIC_RESULT} {{id: r.id}}) SET x += r "
        f"MERGE (x)-[:{Rel.OF_METRIC_TYPE}]->(m) "
        f"MERGE (x)-[:{Rel.MEASURES}]->(e) "
        "RETURN x.id AS id"
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

DELETE_SESSION_RESULTS = (
    f"MATCH (x:{Label.METRIC_RESULT}) WHERE x.sessionId IN $ids DETACH DELETE x"
)

LABEL_PROPERTY_KEYS = "MATCH (n) WHERE $label IN labels(n) WITH n LIMIT 200 UNWIND keys(n) AS k RETURN DISTINCT k"
