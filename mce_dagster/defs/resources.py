"""The resources every asset, IO manager and sensor is given: the knowledge graph,
the judge, the price table, the session queue and the deployment's local folder.

`build_resources(settings)` makes them from the settings the definitions are loaded
with, so no step or sensor tick reads the environment. Their fields are what the UI
shows for each resource, and what each run's job snapshot records as the
configuration it ran with. A secret is never a field's value: the field is
`dg.EnvVar(NAME)`, which Dagster resolves in the process that runs the step, and the
UI shows the variable's name. A URL is one when it carries a password.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

import dagster as dg

from ..core.metric import PriceLookup
from ..graph import KnowledgeGraph, open_graph
from ..report.build import REPORT_PATH
from ..settings import (
    DEFAULT_EMBEDDING_MODEL,
    DEFAULT_PRICES_URL,
    DEFAULT_QUEUE,
    GraphSettings,
    JudgeSettings,
    PriceSettings,
    QueueSettings,
    Settings,
    masked_url,
    rabbitmq_url,
)
from .retries import retried_while_graph_unavailable

KNOWLEDGE_GRAPH = "knowledge_graph"
JUDGE = "judge"
PRICES = "prices"
SESSION_QUEUE = "session_queue"
LOCAL_FILES = "local_files"


def _from(settings: Settings, value: Any, *variables: str) -> Any:
    """`value`, or the first of `variables` that is set as `dg.EnvVar` when the value
    is a secret or holds one (a URL with a password)."""
    if isinstance(value, str) and masked_url(value) != value:
        for name in variables:
            if name in settings.explicit:
                return dg.EnvVar(name)
    return value


def _secret(settings: Settings, *variables: str, unset: str = "") -> Any:
    """The first of `variables` that is set, as `dg.EnvVar`; else `unset`."""
    for name in variables:
        if name in settings.explicit:
            return dg.EnvVar(name)
    return unset


# -- the knowledge graph -----------------------------------------------------------------


class KnowledgeGraphResource(dg.ConfigurableResource):
    """The knowledge graph the engine reads sessions from and writes results to.
    Subclasses choose the backend; assets and IO managers see only this. A step that
    finds the graph unavailable is retried `retries` times, `retry_wait_seconds`
    apart (MCE_GRAPH_RETRIES, MCE_GRAPH_RETRY_WAIT_SECONDS)."""

    retries: int = 3
    retry_wait_seconds: float = 10.0

    def graph_settings(self) -> GraphSettings:
        raise NotImplementedError

    def open(self) -> KnowledgeGraph:
        return open_graph(self.graph_settings())

    @contextmanager
    def retrying(self, context: Any) -> Iterator[None]:
        """Around a step's graph calls: see `retries.retried_while_graph_unavailable`."""
        with retried_while_graph_unavailable(context, self.retries, self.retry_wait_seconds):
            yield


class EmbeddedKnowledgeGraph(KnowledgeGraphResource):
    """The embedded FalkorDB under `mce_home` (MCE_HOME), one server shared by every
    process of the deployment; `graph_name` (MCE_GRAPH_NAME) inside it."""

    mce_home: str
    graph_name: str = "mce"

    def graph_settings(self) -> GraphSettings:
        return GraphSettings(mce_home=Path(self.mce_home).resolve(), graph_name=self.graph_name)


class Neo4jKnowledgeGraph(KnowledgeGraphResource):
    """Neo4j 5 through the official driver (NEO4J_URI or KG_DB_HOST, NEO4J_USERNAME,
    NEO4J_PASSWORD, NEO4J_DATABASE, NEO4J_RETRY_SECONDS)."""

    uri: str
    user: str = "neo4j"
    password: str = ""
    database: str = ""
    retry_seconds: float = 30.0

    def graph_settings(self) -> GraphSettings:
        return GraphSettings(
            neo4j_uri=self.uri,
            neo4j_user=self.user,
            neo4j_password=self.password,
            neo4j_database=self.database or None,
            neo4j_retry_seconds=self.retry_seconds,
        )


def knowledge_graph_resource(settings: Settings) -> KnowledgeGraphResource:
    """The resource for the backend the settings select."""
    retries = {"retries": settings.graph_retries, "retry_wait_seconds": settings.graph_retry_wait_seconds}
    if settings.graph_backend == "neo4j":
        return Neo4jKnowledgeGraph(
            uri=_from(settings, settings.neo4j_uri, "NEO4J_URI", "KG_DB_HOST"),
            user=settings.neo4j_user,
            password=_secret(settings, "NEO4J_PASSWORD", "KG_DB_PASSWORD"),
            database=settings.neo4j_database or "",
            retry_seconds=settings.neo4j_retry_seconds,
            **retries,
        )
    return EmbeddedKnowledgeGraph(mce_home=str(settings.mce_home), graph_name=settings.graph_name, **retries)


# -- the judge -----------------------------------------------------------------------------


class JudgeResource(dg.ConfigurableResource):
    """The judge of the judged metrics and of the providers' metrics that call a
    model: `model` as LiteLLM names it (LLM_MODEL_NAME; empty: no judge, and judged
    metrics fail with the reason), its endpoint and key, the calls per entity
    (`samples`), and `budget_usd`, the ceiling on a run's judge spend (a run's config
    may lower it). The MCE_JUDGE_* variables."""

    model: str = ""
    base_url: str = ""
    api_key: str = ""
    logprobs: bool = True
    samples: int = 1
    temperature: float = 0.0
    concurrency: int = 8
    timeout_seconds: float = 60.0
    retries: int = 4
    max_tokens: int = 512
    cache: str = "off"
    cache_path: str = ""
    budget_usd: Optional[float] = None
    embedding_model: str = DEFAULT_EMBEDDING_MODEL

    def settings(self) -> JudgeSettings:
        return JudgeSettings(
            model=self.model or None,
            api_key=self.api_key or None,
            base_url=self.base_url or None,
            logprobs=self.logprobs,
            samples=self.samples,
            temperature=self.temperature,
            concurrency=self.concurrency,
            timeout=self.timeout_seconds,
            retries=self.retries,
            max_tokens=self.max_tokens,
            cache=self.cache,
            cache_path=Path(self.cache_path) if self.cache_path else None,
            budget_usd=self.budget_usd,
            embedding_model=self.embedding_model,
        )


def judge_resource(settings: Settings) -> JudgeResource:
    judge = settings.judge
    return JudgeResource(
        model=judge.model or "",
        base_url=_from(settings, judge.base_url or "", "LLM_BASE_MODEL_URL_MCE"),
        api_key=_secret(settings, "OPENAI_API_KEY"),
        logprobs=judge.logprobs,
        samples=judge.samples,
        temperature=judge.temperature,
        concurrency=judge.concurrency,
        timeout_seconds=judge.timeout,
        retries=judge.retries,
        max_tokens=judge.max_tokens,
        cache=judge.cache,
        cache_path=str(judge.cache_path or ""),
        budget_usd=judge.budget_usd,
        embedding_model=judge.embedding_model,
    )


# -- the price table -------------------------------------------------------------------------


class PriceTableResource(dg.ConfigurableResource):
    """The model price table the Cost metric and the judge's cost read: the copy in
    the package refreshed from `url` every `ttl_seconds` when `refresh` is on
    (MODEL_PRICES_URL, MODEL_PRICES_TTL_SECONDS, MODEL_PRICES_REFRESH), or the table
    at `path` (MODEL_PRICES_PATH), never refreshed."""

    path: str = ""
    refresh: bool = True
    url: str = DEFAULT_PRICES_URL
    ttl_seconds: float = 86400.0

    def table(self) -> PriceLookup:
        from ..prices import load_price_table

        return load_price_table(
            PriceSettings(refresh=self.refresh, url=self.url, ttl_seconds=self.ttl_seconds, path=Path(self.path) if self.path else None)
        )


def price_table_resource(settings: Settings) -> PriceTableResource:
    prices = settings.prices
    return PriceTableResource(
        path=str(prices.path or ""),
        refresh=prices.refresh,
        url=_from(settings, prices.url, "MODEL_PRICES_URL"),
        ttl_seconds=prices.ttl_seconds,
    )


# -- the session queue ------------------------------------------------------------------------


class SessionQueueResource(dg.ConfigurableResource):
    """The RabbitMQ queue new sessions are announced on, and how much one sensor tick
    takes from it. The broker is `url` (RABBITMQ_URL), else its parts
    (RABBITMQ_HOST, _PORT, _USER, _PASSWORD, _VHOST); `queue` is MCE_SESSION_QUEUE;
    `batch`, `tick_seconds` and `announce_wait_seconds` are MCE_SENSOR_BATCH,
    MCE_SENSOR_TICK_SECONDS and MCE_ANNOUNCE_WAIT_SECONDS."""

    url: str = ""
    host: str = "127.0.0.1"
    port: str = "5672"
    user: str = "guest"
    password: str = "guest"
    vhost: str = "/"
    queue: str = DEFAULT_QUEUE
    batch: int = 500
    tick_seconds: float = 20.0
    announce_wait_seconds: float = 600.0

    def settings(self) -> QueueSettings:
        return QueueSettings(
            rabbitmq_url=self.url or rabbitmq_url(self.user, self.password, self.host, self.port, self.vhost),
            session_queue=self.queue,
            sensor_batch=self.batch,
            sensor_tick_seconds=self.tick_seconds,
            announce_wait_seconds=self.announce_wait_seconds,
        )


def session_queue_resource(settings: Settings) -> SessionQueueResource:
    tick = {
        "queue": settings.session_queue,
        "batch": settings.sensor_batch,
        "tick_seconds": settings.sensor_tick_seconds,
        "announce_wait_seconds": settings.announce_wait_seconds,
    }
    if "RABBITMQ_URL" in settings.explicit:
        return SessionQueueResource(url=dg.EnvVar("RABBITMQ_URL"), **tick)
    from urllib.parse import unquote, urlsplit

    # The URL the settings composed from the parts: the parts again, the password as its variable.
    parts = urlsplit(settings.rabbitmq_url)
    return SessionQueueResource(
        host=parts.hostname or "127.0.0.1",
        port=str(parts.port or 5672),
        user=unquote(parts.username or "guest"),
        password=_secret(settings, "RABBITMQ_PASSWORD", unset="guest"),
        vhost=unquote(parts.path[1:]) or "/",
        **tick,
    )


# -- the local folder ----------------------------------------------------------------------------


class LocalFilesResource(dg.ConfigurableResource):
    """The deployment's folder of local files, `mce_home` (MCE_HOME): the evaluation
    report's HTML, the provider libraries' caches."""

    mce_home: str

    def report_path(self) -> Path:
        return Path(self.mce_home) / REPORT_PATH

    def library_files(self) -> Path:
        return Path(self.mce_home) / "deepeval"


def build_resources(settings: Settings) -> dict[str, dg.ConfigurableResource]:
    """Every resource but the IO managers, from one reading of the settings."""
    return {
        KNOWLEDGE_GRAPH: knowledge_graph_resource(settings),
        JUDGE: judge_resource(settings),
        PRICES: price_table_resource(settings),
        SESSION_QUEUE: session_queue_resource(settings),
        LOCAL_FILES: LocalFilesResource(mce_home=str(settings.mce_home)),
    }
