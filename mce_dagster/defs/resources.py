"""Resources configured from the environment: one resource class per graph backend
(the embedded FalkorDB, Neo4j), behind `KnowledgeGraphResource`."""

import dataclasses
from pathlib import Path

import dagster as dg

from ..graph import KnowledgeGraph, open_graph
from ..settings import Settings


class KnowledgeGraphResource(dg.ConfigurableResource):
    """The knowledge graph the engine reads sessions from and writes results to.
    Subclasses choose the backend; assets and IO managers see only this."""

    def open(self) -> KnowledgeGraph:
        raise NotImplementedError


class EmbeddedKnowledgeGraph(KnowledgeGraphResource):
    """The embedded FalkorDB, one server shared by every process of the deployment.
    Empty fields mean "from the settings where the graph is opened" ($MCE_HOME,
    $MCE_GRAPH_NAME), so a run worker started elsewhere still finds the same store."""

    mce_home: str = ""
    graph_name: str = ""

    def open(self) -> KnowledgeGraph:
        settings = Settings.from_env()
        return open_graph(
            dataclasses.replace(
                settings,
                mce_home=Path(self.mce_home).resolve() if self.mce_home else settings.mce_home,
                graph_name=self.graph_name or settings.graph_name,
            )
        )


class Neo4jKnowledgeGraph(KnowledgeGraphResource):
    """Neo4j 5 through the official driver. Empty fields mean "from the settings"
    (NEO4J_URI or KG_DB_HOST, NEO4J_USERNAME, NEO4J_PASSWORD, NEO4J_DATABASE)."""

    uri: str = ""
    user: str = ""
    password: str = ""
    database: str = ""

    def open(self) -> KnowledgeGraph:
        settings = Settings.from_env()
        return open_graph(
            dataclasses.replace(
                settings,
                neo4j_uri=self.uri or settings.neo4j_uri,
                neo4j_user=self.user or settings.neo4j_user,
                neo4j_password=self.password or settings.neo4j_password,
                neo4j_database=self.database or settings.neo4j_database,
            )
        )


def knowledge_graph_resource() -> KnowledgeGraphResource:
    """The resource for the backend the environment selects. Variables that are set
    are passed as `dg.EnvVar`, so the UI shows where a value comes from, not the value
    (a password never appears in the UI or the logs)."""
    settings = Settings.from_env()
    explicit = settings.explicit
    if settings.graph_backend == "neo4j":
        fields = {
            field: dg.EnvVar(variable)
            for field, variable in (("uri", "NEO4J_URI"), ("user", "NEO4J_USERNAME"), ("password", "NEO4J_PASSWORD"), ("database", "NEO4J_DATABASE"))
            if variable in explicit
        }
        return Neo4jKnowledgeGraph(**fields)
    fields = {
        field: dg.EnvVar(variable)
        for field, variable in (("mce_home", "MCE_HOME"), ("graph_name", "MCE_GRAPH_NAME"))
        if variable in explicit
    }
    return EmbeddedKnowledgeGraph(**fields)
