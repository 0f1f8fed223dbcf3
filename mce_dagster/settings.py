"""Settings from the environment: the one module of the project that reads it.

Every process (the CLI, the Dagster webserver, daemon and run workers, a notebook)
reads the same variables, so one deployment points at one graph and one Dagster
instance. `Settings.from_env()` is called where a process opens something (the
graph, the instance), not at import, so a test or a notebook may set a variable
first. `VARIABLES` lists every variable, with its default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: (name, default, meaning) of every variable the project reads; the README's table.
VARIABLES: tuple[tuple[str, str, str], ...] = (
    ("MCE_HOME", "./.mce", "the embedded graph's files and server socket, the local Dagster instance"),
    ("DAGSTER_HOME", "$MCE_HOME/dagster", "the Dagster instance (runs, events, partitions)"),
    ("MCE_GRAPH_NAME", "mce", "the graph inside the store"),
    ("MCE_CONFIG", "the bundled mce_config.yaml", "which metrics run at which scope"),
    ("MODEL_PRICES_PATH", "LiteLLM's bundled price table", "the price table the Cost metric reads"),
    ("NEO4J_URI", "unset: the embedded FalkorDB", "the Neo4j server (bolt:// or neo4j://); setting it selects the Neo4j backend"),
    ("KG_DB_HOST", "unset", "instead of NEO4J_URI: the Neo4j host (with KG_DB_PORT, default 7687)"),
    ("NEO4J_USERNAME", "neo4j", "the Neo4j user (also KG_DB_USER)"),
    ("NEO4J_PASSWORD", "none", "the Neo4j password (also KG_DB_PASSWORD); never logged"),
    ("NEO4J_DATABASE", "the server's default", "the Neo4j database (also KG_DB_NAME)"),
)


def _path(value: str | None) -> Path | None:
    return Path(value).expanduser().resolve() if value else None


@dataclass(frozen=True)
class Settings:
    mce_home: Path
    dagster_home: Path
    graph_name: str = "mce"
    config_path: Path | None = None
    prices_path: Path | None = None
    neo4j_uri: str | None = None
    neo4j_user: str = "neo4j"
    neo4j_password: str = field(default="", repr=False)
    neo4j_database: str | None = None
    #: the variables of `VARIABLES` that were set, so defaults can be told from choices
    explicit: frozenset[str] = frozenset()

    @property
    def graph_backend(self) -> str:
        return "neo4j" if self.neo4j_uri else "embedded"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        env = os.environ if env is None else env
        home = _path(env.get("MCE_HOME")) or Path(".mce").resolve()
        return cls(
            mce_home=home,
            dagster_home=_path(env.get("DAGSTER_HOME")) or home / "dagster",
            graph_name=env.get("MCE_GRAPH_NAME") or "mce",
            config_path=_path(env.get("MCE_CONFIG")),
            prices_path=_path(env.get("MODEL_PRICES_PATH")),
            neo4j_uri=_neo4j_uri(env),
            neo4j_user=env.get("NEO4J_USERNAME") or env.get("KG_DB_USER") or "neo4j",
            neo4j_password=env.get("NEO4J_PASSWORD") or env.get("KG_DB_PASSWORD") or "",
            neo4j_database=env.get("NEO4J_DATABASE") or env.get("KG_DB_NAME") or None,
            explicit=frozenset(name for name, _, _ in VARIABLES if env.get(name)),
        )


def _neo4j_uri(env: Mapping[str, str]) -> str | None:
    if env.get("NEO4J_URI"):
        return env["NEO4J_URI"]
    host = env.get("KG_DB_HOST")
    if not host:
        return None
    return host if "://" in host else f"bolt://{host}:{env.get('KG_DB_PORT') or 7687}"
