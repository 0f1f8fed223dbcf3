"""Settings from the environment: the one module of the project that reads it.

A process reads the environment once, where it starts: the CLI's entry, the code
location loading its definitions (`mce_dagster.definitions`), a server starting.
`Settings.from_env()` validates the variables (`Environment`, through pydantic-settings)
into the frozen `Settings` the rest of the project is handed; inside Dagster the
resources carry them (`mce_dagster.defs.resources`), so no run step or sensor tick reads
the environment. It is never called at import, so a test or a notebook may set a
variable first. `mce --env-file` puts a file's variables in the environment before
that (python-dotenv's parser). `VARIABLES` lists every variable, with its default.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Optional

from pydantic import AliasChoices, BeforeValidator, Field, SecretStr, ValidationError, ValidationInfo
from pydantic_core import PydanticCustomError, PydanticUseDefault
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

#: (name, default, meaning) of every variable the project reads; the table in docs/configuration.md.
VARIABLES: tuple[tuple[str, str, str], ...] = (
    ("MCE_HOME", "./.mce", "the embedded graph's files and server socket, the local Dagster instance"),
    ("DAGSTER_HOME", "$MCE_HOME/dagster", "the Dagster instance (runs, events, partitions)"),
    ("MCE_GRAPH_NAME", "mce", "the graph inside the store"),
    ("MCE_CONFIG", "the bundled mce_config.yaml", "which metrics run at which scope"),
    ("MODEL_PRICES_PATH", "the trimmed copy in the package (mce_dagster/data/model_prices.json)", "another price table for the Cost metric and the judge (never refreshed)"),
    ("NEO4J_URI", "unset: the embedded FalkorDB", "the Neo4j server (bolt:// or neo4j://); setting it selects the Neo4j backend"),
    ("KG_DB_HOST", "unset", "instead of NEO4J_URI: the Neo4j host (with KG_DB_PORT, default 7687)"),
    ("NEO4J_USERNAME", "neo4j", "the Neo4j user (also KG_DB_USER)"),
    ("NEO4J_PASSWORD", "none", "the Neo4j password (also KG_DB_PASSWORD); never logged"),
    ("NEO4J_DATABASE", "the server's default", "the Neo4j database (also KG_DB_NAME)"),
    ("NEO4J_RETRY_SECONDS", "30", "how long the Neo4j driver retries a transaction on a dropped connection before the graph counts as unreachable"),
    ("MCE_GRAPH_RETRIES", "3", "times a run step that finds the graph unreachable is retried before the run fails (the daemon's run retries take over then)"),
    ("MCE_GRAPH_RETRY_WAIT_SECONDS", "10", "seconds between those step retries"),
    ("LLM_MODEL_NAME", "unset: judged metrics are skipped", "the judge model, as LiteLLM names it (openai/gpt-4o-mini, ollama/llama3.1, ...)"),
    ("OPENAI_API_KEY", "unset", "the judge's API key (LiteLLM's own provider variables work too); never logged"),
    ("LLM_BASE_MODEL_URL_MCE", "the provider's", "an OpenAI-compatible endpoint for the judge (vLLM, Ollama, a LiteLLM proxy)"),
    ("MCE_JUDGE_LOGPROBS", "true", "read the expected score from the log-probabilities of the digits 1 to 5"),
    ("MCE_JUDGE_SAMPLES", "1", "judge calls per entity, averaged (their spread kept)"),
    ("MCE_JUDGE_TEMPERATURE", "0.0 for one sample, 0.7 for several", "the judge's temperature"),
    ("MCE_JUDGE_CONCURRENCY", "8", "judge calls in flight at once, per process"),
    ("MCE_JUDGE_TIMEOUT", "60", "seconds per judge call"),
    ("MCE_JUDGE_EMBEDDING_MODEL", "text-embedding-3-small", "the embedding model of provider metrics that embed (ragas.AnswerRelevancy), as LiteLLM names it"),
    ("MCE_JUDGE_RETRIES", "4", "retries of a judge call on 429, 5xx, timeouts (honouring Retry-After)"),
    ("MCE_JUDGE_MAX_TOKENS", "512", "the longest judge reply, in tokens"),
    ("MCE_JUDGE_CACHE", "off", "off, live (reuse a recorded reply, else call and record), record (always call, record), replay (recorded replies only; a miss is an error)"),
    ("MCE_JUDGE_CACHE_PATH", "$MCE_HOME/judge-cache.sqlite", "the record/replay cache"),
    ("MCE_JUDGE_BUDGET_USD", "unset: no ceiling", "a ceiling on judge spend per `mce compute` (also --budget, and run config in Dagster)"),
    ("MODEL_PRICES_REFRESH", "true", "refresh the price table from MODEL_PRICES_URL at the first lookup and every TTL"),
    ("MODEL_PRICES_URL", "LiteLLM's model_prices_and_context_window.json on GitHub", "where the price table is refreshed from"),
    ("MODEL_PRICES_TTL_SECONDS", "86400", "seconds between price-table refreshes"),
    ("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/%2F", "the RabbitMQ broker of the session queue (AMQP URL); never logged"),
    ("RABBITMQ_HOST", "127.0.0.1", "instead of RABBITMQ_URL: the broker's host"),
    ("RABBITMQ_PORT", "5672", "the broker's AMQP port, with RABBITMQ_HOST"),
    ("RABBITMQ_USER", "guest", "the RabbitMQ user, with RABBITMQ_HOST"),
    ("RABBITMQ_PASSWORD", "guest", "the RabbitMQ password, with RABBITMQ_HOST; never logged"),
    ("RABBITMQ_VHOST", "/", "the RabbitMQ virtual host, with RABBITMQ_HOST"),
    ("MCE_SESSION_QUEUE", "new_session_to_mce", "the queue new sessions are announced on (dead letters go to NAME.dlq)"),
    ("MCE_SENSOR_BATCH", "500", "most messages (queue sensor) or sessions (poll sensor) one sensor tick takes; they are evaluated together"),
    ("MCE_SENSOR_TICK_SECONDS", "20", "time budget of one sensor tick (Dagster's tick time-out is 60 s)"),
    ("MCE_SENSOR_INTERVAL", "10", "seconds between two ticks of a sensor"),
    ("MCE_ANNOUNCE_WAIT_SECONDS", "600", "how long a session announced before it is in the graph is retried before it is dead-lettered"),
    ("MCE_API_TOKEN", "unset: no token, loopback only", "the bearer token the REST API and MCP over HTTP require (`Authorization: Bearer TOKEN`), 16 characters or more; needed to serve on anything but loopback; never logged"),
    ("MCE_ALLOWED_HOSTS", "unset: the loopback names only", "more `Host` names (comma-separated, `name` or `name:port`) the REST API and MCP over HTTP answer to, as behind a reverse proxy; any other is refused with 421"),
    ("MCE_MAX_REQUEST_BYTES", "1048576", "the largest request body the REST API and MCP over HTTP read (1 MiB); a larger one is refused with 413"),
    ("MCE_QUERY_RESULTS_KEPT", "200", "answers of query_metric kept under $MCE_HOME/query_results for verify_answer; the least recently saved go first"),
)

JUDGE_CACHE_MODES = ("off", "live", "record", "replay")
DEFAULT_PRICES_URL = "https://raw.githubusercontent.com/BerriAI/litellm/main/model_prices_and_context_window.json"
DEFAULT_QUEUE = "new_session_to_mce"
DEFAULT_EMBEDDING_MODEL = "text-embedding-3-small"


# -- the variables as pydantic-settings reads them -------------------------------------
#
# Each check below raises the project's own message (`name='value' is not a number`),
# never pydantic's, so that a message names the variable and its value only where the
# value is a number; a secret is only ever a `SecretStr`, checked for nothing.


def _refused(message: str) -> PydanticCustomError:
    return PydanticCustomError("mce_setting", "{message}", {"message": message})


def _unset_when_blank(raw: Any) -> Any:
    if isinstance(raw, str) and not raw.strip():
        raise PydanticUseDefault()
    return raw


def _stripped(raw: Any) -> Any:
    return _unset_when_blank(raw).strip() if isinstance(raw, str) else raw


def _flag(raw: Any) -> Any:
    """Anything but 0, false, no and off is on; blank is the default."""
    raw = _unset_when_blank(raw)
    return raw.strip().lower() not in ("0", "false", "no", "off") if isinstance(raw, str) else raw


def _path(raw: Any) -> Any:
    return Path(raw).expanduser().resolve() if isinstance(raw, str) else raw


def _number(kind: type, minimum: float | None = None):
    """A number of `kind`; with `minimum`, at least that (a bounded integer that is
    not one is "not a number", as those messages have always said)."""
    noun = "an integer" if kind is int and minimum is None else "a number"

    def check(raw: Any, info: ValidationInfo) -> Any:
        if not isinstance(raw, str):
            return raw
        try:
            value = kind(raw)
        except ValueError:
            raise _refused(f"{info.field_name}={raw!r} is not {noun}") from None
        if minimum is not None and value < minimum:
            raise _refused(f"{info.field_name}={raw!r} is below its minimum {minimum}")
        return value

    return BeforeValidator(check)


def _count(raw: Any, info: ValidationInfo) -> Any:
    """An integer of 1 or more."""
    if not isinstance(raw, str):
        return raw
    try:
        value = int(raw)
    except ValueError:
        raise _refused(f"{info.field_name}={raw!r} is not an integer") from None
    if value < 1:
        raise _refused(f"{info.field_name}={value} must be 1 or more")
    return value


def _cache_mode(raw: Any) -> Any:
    mode = raw.strip().lower() if isinstance(raw, str) else raw
    if mode not in JUDGE_CACHE_MODES:
        raise _refused(f"MCE_JUDGE_CACHE={mode!r} is not one of {', '.join(JUDGE_CACHE_MODES)}")
    return mode


def _host_names(raw: Any) -> Any:
    if isinstance(raw, str):
        return tuple(h.strip().lower() for h in raw.split(",") if h.strip())
    return raw


Flag = Annotated[bool, BeforeValidator(_flag)]
Folder = Annotated[Optional[Path], BeforeValidator(_path)]
Text = Annotated[Optional[str], BeforeValidator(_stripped)]


class Environment(BaseSettings):
    """The variables of `VARIABLES`, as set: a field per variable, named as it is
    (with the older KG_DB_* names as aliases). Empty means unset. `Settings.from_env`
    turns this into `Settings`, with the defaults that depend on other variables."""

    model_config = SettingsConfigDict(case_sensitive=True, env_ignore_empty=True, extra="ignore", frozen=True)

    MCE_HOME: Folder = None
    DAGSTER_HOME: Folder = None
    MCE_GRAPH_NAME: str = "mce"
    MCE_CONFIG: Folder = None
    MODEL_PRICES_PATH: Folder = None
    NEO4J_URI: Optional[str] = Field(None, repr=False)
    KG_DB_HOST: Optional[str] = Field(None, repr=False)
    KG_DB_PORT: Optional[str] = None
    NEO4J_USERNAME: str = Field("neo4j", validation_alias=AliasChoices("NEO4J_USERNAME", "KG_DB_USER"))
    NEO4J_PASSWORD: SecretStr = Field(SecretStr(""), validation_alias=AliasChoices("NEO4J_PASSWORD", "KG_DB_PASSWORD"))
    NEO4J_DATABASE: Optional[str] = Field(None, validation_alias=AliasChoices("NEO4J_DATABASE", "KG_DB_NAME"))
    NEO4J_RETRY_SECONDS: Annotated[float, _number(float, 0.0)] = 30.0
    MCE_GRAPH_RETRIES: Annotated[int, _number(int, 0)] = 3
    MCE_GRAPH_RETRY_WAIT_SECONDS: Annotated[float, _number(float, 0.0)] = 10.0
    RABBITMQ_URL: Optional[str] = Field(None, repr=False)
    RABBITMQ_HOST: str = "127.0.0.1"
    RABBITMQ_PORT: str = "5672"
    RABBITMQ_USER: str = "guest"
    RABBITMQ_PASSWORD: SecretStr = SecretStr("guest")
    RABBITMQ_VHOST: str = "/"
    MCE_SESSION_QUEUE: str = DEFAULT_QUEUE
    MCE_SENSOR_BATCH: Annotated[int, _number(int, 1)] = 500
    MCE_SENSOR_TICK_SECONDS: Annotated[float, _number(float, 1.0)] = 20.0
    MCE_SENSOR_INTERVAL: Annotated[int, _number(int, 1)] = 10
    MCE_ANNOUNCE_WAIT_SECONDS: Annotated[float, _number(float, 0.0)] = 600.0
    MCE_API_TOKEN: Optional[SecretStr] = None
    # A comma-separated list, not JSON (NoDecode: pydantic-settings would read it as JSON).
    MCE_ALLOWED_HOSTS: Annotated[tuple[str, ...], NoDecode, BeforeValidator(_host_names)] = ()
    MCE_MAX_REQUEST_BYTES: Annotated[int, _number(int, 1024)] = 1_048_576
    MCE_QUERY_RESULTS_KEPT: Annotated[int, _number(int, 1)] = 200
    MCE_JUDGE_SAMPLES: Annotated[int, BeforeValidator(_count)] = 1
    MCE_JUDGE_CACHE: Annotated[str, BeforeValidator(_cache_mode)] = "off"
    MCE_JUDGE_CONCURRENCY: Annotated[int, BeforeValidator(_count)] = 8
    MCE_JUDGE_TEMPERATURE: Annotated[Optional[float], _number(float)] = None
    MCE_JUDGE_TIMEOUT: Annotated[float, _number(float)] = 60.0
    MCE_JUDGE_RETRIES: Annotated[int, _number(int)] = 4
    MCE_JUDGE_MAX_TOKENS: Annotated[int, _number(int)] = 512
    MCE_JUDGE_CACHE_PATH: Folder = None
    MCE_JUDGE_BUDGET_USD: Annotated[Optional[float], _number(float)] = None
    MCE_JUDGE_EMBEDDING_MODEL: Annotated[str, BeforeValidator(_stripped)] = DEFAULT_EMBEDDING_MODEL
    MCE_JUDGE_LOGPROBS: Flag = True
    LLM_MODEL_NAME: Text = None
    OPENAI_API_KEY: Optional[SecretStr] = None
    LLM_BASE_MODEL_URL_MCE: Annotated[Optional[str], BeforeValidator(_stripped), Field(repr=False)] = None
    MODEL_PRICES_REFRESH: Flag = True
    MODEL_PRICES_URL: str = Field(DEFAULT_PRICES_URL, repr=False)
    MODEL_PRICES_TTL_SECONDS: Annotated[float, _number(float)] = 86400.0


class _GivenEnvironment(Environment):
    """`Environment` from a mapping given in place of the process's environment."""

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings):
        return (init_settings,)


#: Every variable `Environment` reads, aliases included.
READ_VARIABLES: tuple[str, ...] = tuple(
    name
    for key, info in Environment.model_fields.items()
    for name in (info.validation_alias.choices if isinstance(info.validation_alias, AliasChoices) else [key])
)


def read_environment(env: Mapping[str, str] | None = None) -> Environment:
    """The variables, validated; a `ConfigurationError` naming the first one that is
    wrong. `env`: a mapping read instead of the process's environment."""
    from .errors import ConfigurationError

    try:
        if env is None:
            return Environment()
        return _GivenEnvironment(**{k: v for k, v in env.items() if k in READ_VARIABLES and v})
    except ValidationError as exc:
        first = exc.errors(include_input=False)[0]
        if first["type"] == "mce_setting":
            raise ConfigurationError(first["msg"]) from None
        # Not one of the project's checks: the variable and pydantic's reason, never the value.
        raise ConfigurationError(f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None


# -- the settings the project is handed --------------------------------------------------


@dataclass(frozen=True)
class JudgeSettings:
    """How the judge is reached and how it scores. `model` None: no judge."""

    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    base_url: str | None = field(default=None, repr=False)
    logprobs: bool = True
    samples: int = 1
    temperature: float = 0.0
    concurrency: int = 8
    timeout: float = 60.0
    retries: int = 4
    max_tokens: int = 512
    cache: str = "off"
    cache_path: Path | None = None
    budget_usd: float | None = None
    # For provider metrics that embed text (Ragas's AnswerRelevancy), at the same endpoint.
    embedding_model: str = DEFAULT_EMBEDDING_MODEL

    @property
    def configured(self) -> bool:
        return bool(self.model)


@dataclass(frozen=True)
class PriceSettings:
    refresh: bool = True
    url: str = DEFAULT_PRICES_URL
    ttl_seconds: float = 86400.0
    #: another table than the committed copy (MODEL_PRICES_PATH), never refreshed
    path: Path | None = None


@dataclass(frozen=True)
class GraphSettings:
    """Where the knowledge graph is: the embedded FalkorDB under `mce_home`, or Neo4j
    when `neo4j_uri` is set. The same attribute names as `Settings`."""

    def __post_init__(self) -> None:
        if self.mce_home is None and not self.neo4j_uri:
            raise ValueError("the embedded graph needs its folder (mce_home)")

    mce_home: Path | None = None
    graph_name: str = "mce"
    neo4j_uri: str | None = field(default=None, repr=False)
    neo4j_user: str = "neo4j"
    neo4j_password: str = field(default="", repr=False)
    neo4j_database: str | None = None
    neo4j_retry_seconds: float = 30.0

    @property
    def graph_backend(self) -> str:
        return "neo4j" if self.neo4j_uri else "embedded"


@dataclass(frozen=True)
class QueueSettings:
    """The session queue and how a sensor tick takes from it. The same attribute
    names as `Settings`."""

    rabbitmq_url: str = field(default="amqp://guest:guest@127.0.0.1:5672/%2F", repr=False)
    session_queue: str = DEFAULT_QUEUE
    sensor_batch: int = 500
    sensor_tick_seconds: float = 20.0
    announce_wait_seconds: float = 600.0


@dataclass(frozen=True)
class Settings:
    mce_home: Path
    dagster_home: Path
    graph_name: str = "mce"
    config_path: Path | None = None
    prices_path: Path | None = None
    neo4j_uri: str | None = field(default=None, repr=False)
    neo4j_user: str = "neo4j"
    neo4j_password: str = field(default="", repr=False)
    neo4j_database: str | None = None
    neo4j_retry_seconds: float = 30.0
    graph_retries: int = 3
    graph_retry_wait_seconds: float = 10.0
    #: the broker of the session queue, as an AMQP URL (it holds the password)
    rabbitmq_url: str = field(default="amqp://guest:guest@127.0.0.1:5672/%2F", repr=False)
    session_queue: str = DEFAULT_QUEUE
    sensor_batch: int = 500
    sensor_tick_seconds: float = 20.0
    sensor_interval: int = 10
    announce_wait_seconds: float = 600.0
    #: the bearer token of the HTTP servers; None: no token, so loopback only
    api_token: str | None = field(default=None, repr=False)
    #: Host names the HTTP servers answer to besides the loopback names
    allowed_hosts: tuple[str, ...] = ()
    max_request_bytes: int = 1_048_576
    query_results_kept: int = 200
    judge: JudgeSettings = JudgeSettings()
    prices: PriceSettings = PriceSettings()
    #: the variables (of `READ_VARIABLES`) that were set, so defaults can be told from choices
    explicit: frozenset[str] = frozenset()

    @property
    def graph_backend(self) -> str:
        return self.graph.graph_backend

    @property
    def graph(self) -> GraphSettings:
        return GraphSettings(
            self.mce_home, self.graph_name, self.neo4j_uri, self.neo4j_user, self.neo4j_password,
            self.neo4j_database, self.neo4j_retry_seconds,
        )

    @property
    def queue(self) -> QueueSettings:
        return QueueSettings(
            self.rabbitmq_url, self.session_queue, self.sensor_batch, self.sensor_tick_seconds, self.announce_wait_seconds
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        """The settings of the process's environment (or of `env`); a
        `ConfigurationError` names a variable that is wrong."""
        e = read_environment(env)
        home = e.MCE_HOME or Path(".mce").resolve()
        given = os.environ if env is None else env
        samples = e.MCE_JUDGE_SAMPLES
        return cls(
            mce_home=home,
            dagster_home=e.DAGSTER_HOME or home / "dagster",
            graph_name=e.MCE_GRAPH_NAME,
            config_path=e.MCE_CONFIG,
            prices_path=e.MODEL_PRICES_PATH,
            neo4j_uri=_neo4j_uri(e),
            neo4j_user=e.NEO4J_USERNAME,
            neo4j_password=e.NEO4J_PASSWORD.get_secret_value(),
            neo4j_database=e.NEO4J_DATABASE,
            neo4j_retry_seconds=e.NEO4J_RETRY_SECONDS,
            graph_retries=e.MCE_GRAPH_RETRIES,
            graph_retry_wait_seconds=e.MCE_GRAPH_RETRY_WAIT_SECONDS,
            rabbitmq_url=e.RABBITMQ_URL or rabbitmq_url(
                e.RABBITMQ_USER, e.RABBITMQ_PASSWORD.get_secret_value(), e.RABBITMQ_HOST, e.RABBITMQ_PORT, e.RABBITMQ_VHOST
            ),
            session_queue=e.MCE_SESSION_QUEUE,
            sensor_batch=e.MCE_SENSOR_BATCH,
            sensor_tick_seconds=e.MCE_SENSOR_TICK_SECONDS,
            sensor_interval=e.MCE_SENSOR_INTERVAL,
            announce_wait_seconds=e.MCE_ANNOUNCE_WAIT_SECONDS,
            api_token=e.MCE_API_TOKEN.get_secret_value() if e.MCE_API_TOKEN else None,
            allowed_hosts=e.MCE_ALLOWED_HOSTS,
            max_request_bytes=e.MCE_MAX_REQUEST_BYTES,
            query_results_kept=e.MCE_QUERY_RESULTS_KEPT,
            judge=JudgeSettings(
                model=e.LLM_MODEL_NAME or None,
                api_key=e.OPENAI_API_KEY.get_secret_value() if e.OPENAI_API_KEY else None,
                base_url=e.LLM_BASE_MODEL_URL_MCE or None,
                logprobs=e.MCE_JUDGE_LOGPROBS,
                samples=samples,
                temperature=e.MCE_JUDGE_TEMPERATURE if e.MCE_JUDGE_TEMPERATURE is not None else (0.0 if samples == 1 else 0.7),
                concurrency=e.MCE_JUDGE_CONCURRENCY,
                timeout=e.MCE_JUDGE_TIMEOUT,
                retries=e.MCE_JUDGE_RETRIES,
                max_tokens=e.MCE_JUDGE_MAX_TOKENS,
                cache=e.MCE_JUDGE_CACHE,
                cache_path=e.MCE_JUDGE_CACHE_PATH or home / "judge-cache.sqlite",
                budget_usd=e.MCE_JUDGE_BUDGET_USD,
                embedding_model=e.MCE_JUDGE_EMBEDDING_MODEL or DEFAULT_EMBEDDING_MODEL,
            ),
            prices=PriceSettings(
                refresh=e.MODEL_PRICES_REFRESH,
                url=e.MODEL_PRICES_URL,
                ttl_seconds=e.MODEL_PRICES_TTL_SECONDS,
                path=e.MODEL_PRICES_PATH,
            ),
            explicit=frozenset(name for name in READ_VARIABLES if given.get(name)),
        )


def _neo4j_uri(e: Environment) -> str | None:
    if e.NEO4J_URI:
        return e.NEO4J_URI
    host = e.KG_DB_HOST
    if not host:
        return None
    return host if "://" in host else f"bolt://{host}:{e.KG_DB_PORT or 7687}"


def rabbitmq_url(user: str, password: str, host: str, port: str | int, vhost: str) -> str:
    """The AMQP URL of a broker given by its parts (each quoted as a URL needs)."""
    from urllib.parse import quote

    return f"amqp://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{port}/{quote(vhost, safe='')}"


# -- secrets: never in a message, a log line or a file ----------------------------------

#: Variables whose whole value is a secret.
SECRET_VARIABLES = ("NEO4J_PASSWORD", "KG_DB_PASSWORD", "OPENAI_API_KEY", "RABBITMQ_PASSWORD", "DAGSTER_PG_PASSWORD")
#: Variables holding a URL that may carry a password (`scheme://user:password@host`).
URL_VARIABLES = ("NEO4J_URI", "KG_DB_HOST", "RABBITMQ_URL", "LLM_BASE_MODEL_URL_MCE", "MODEL_PRICES_URL")
MASK = "***"
# Shorter values are not looked for in messages: "" or "a" would mask every other word.
_SHORTEST_SECRET = 4


def _userinfo(url: str) -> tuple[str, str, str] | None:
    """(scheme://, user info, @host...) of a URL with user info, else None. The user
    info runs to the last `@`: a password with an unescaped `@` or `/` is still covered
    (a host is masked with it rather than a password shown)."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return None
    userinfo, _, host = rest.rpartition("@")
    return scheme + sep, userinfo, "@" + host


def masked_url(url: str) -> str:
    """`url` as it may be printed: the password of its user info replaced by ***, a
    user info with no password (a token as the user) masked whole."""
    parts = _userinfo(url)
    if parts is None:
        return url
    scheme, userinfo, host = parts
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}{user}:{MASK}{host}" if colon else f"{scheme}{MASK}{host}"


def secret_values(env: Mapping[str, str] | None = None, also: Iterable[str] = ()) -> list[str]:
    """Every secret the environment holds, longest first: the values of
    SECRET_VARIABLES and the passwords inside URL_VARIABLES, as given and decoded;
    with `also`, secrets and URLs given some other way (a resource's config)."""
    from urllib.parse import unquote

    env = os.environ if env is None else env
    given = list(also)
    found = {env.get(name) or "" for name in SECRET_VARIABLES} | {s for s in given if "://" not in s}
    for url in [env.get(name) or "" for name in URL_VARIABLES] + given:
        parts = _userinfo(url)
        if parts:
            userinfo = parts[1]
            found.add(userinfo)
            secret = userinfo.partition(":")[2]
            found.update((secret, unquote(secret)))
    return sorted((s for s in found if len(s) >= _SHORTEST_SECRET), key=len, reverse=True)


def redact(text: str, env: Mapping[str, str] | None = None, also: Iterable[str] = ()) -> str:
    """`text` (a driver's message, an error from a library) with every secret of the
    environment (and of `also`) replaced by ***, for messages the project passes on.
    A URL of `also` quoted whole is shown masked."""
    also = list(also)
    for url in also:
        if "://" in url:
            text = text.replace(url, masked_url(url))
    for secret in secret_values(env, also):
        text = text.replace(secret, MASK)
    return text


def prepare_litellm_environment() -> None:
    """Before LiteLLM is imported: use its bundled price map instead of fetching
    one at import (no network at import; the project refreshes prices itself)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


# -- env files (`mce --env-file PATH`) -------------------------------------------------

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# The only part of a malformed line an error shows: a name in upper case, as variables
# are written, followed by a space or a colon (`NEO4J_PASSWORD pw-...`). A word alone
# on its line, or one in mixed case, may be a pasted key.
_SHOWN_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}(?=[ \t:])")


def parse_env_file(text: str, source: str = "env file") -> dict[str, str]:
    """`NAME=value` lines -> {NAME: value}, as python-dotenv reads them: blank lines
    and `#` comments skipped, a leading `export ` allowed, a value in quotes taken
    from inside them. Any other line is an error that names its number and the
    variable it starts with, never the value (it may be a password)."""
    from dotenv.parser import parse_stream

    values: dict[str, str] = {}
    for binding in parse_stream(io.StringIO(text)):
        if binding.key is None and not binding.error:
            continue  # blank lines and comments
        if binding.error or binding.value is None or not _ENV_NAME.match(binding.key or ""):
            raise _malformed(binding.original.string, binding.original.line, source)
        values[binding.key] = binding.value
    return values


def _malformed(statement: str, line: int, source: str) -> Exception:
    from .errors import ConfigurationError

    # python-dotenv counts a statement from the blank lines before it.
    body = statement.lstrip()
    number = line + statement[: len(statement) - len(body)].count("\n")
    first = body.splitlines()[0].strip() if body else ""
    first = first[len("export "):].lstrip() if first.startswith("export ") else first
    name, sep, _ = first.partition("=")
    shown = _SHOWN_NAME.match(first)
    if not sep:
        found = "no '='"
    elif not _ENV_NAME.match(name.strip()):
        found = "something other than a variable name before the '='"
    else:
        found = "a value python-dotenv cannot read (a quote left open?)"
    return ConfigurationError(
        f"{source}:{number}{f' ({shown.group()})' if shown else ''}: expected NAME=value, found {found}"
        " (the line is not shown: it may hold a secret)"
    )


def load_env_file(path: Path | str) -> dict[str, str]:
    """Set the variables of an env file in this process's environment, over any
    already set (the file is what the command line asked for), so the processes this
    one starts see them too. Call it before anything reads the settings. Returns what
    was set."""
    from .errors import ConfigurationError

    path = Path(path)
    if not path.is_file():
        where = "is a directory" if path.is_dir() else "does not exist"
        raise ConfigurationError(f"--env-file {path} {where}: give a file of NAME=value lines (as in MCE_HOME=/data/mce)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"--env-file {path} cannot be read: {exc}") from None
    values = parse_env_file(text, str(path))
    os.environ.update(values)
    return values
