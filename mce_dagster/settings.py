"""Settings from the environment: the one module of the project that reads it.

Every process (the CLI, the Dagster webserver, daemon and run workers, a notebook)
reads the same variables, so one deployment points at one graph and one Dagster
instance. `Settings.from_env()` is called where a process opens something (the
graph, the instance), not at import, so a test or a notebook may set a variable
first. `VARIABLES` lists every variable, with its default.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: (name, default, meaning) of every variable the project reads; the README's table.
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


def _flag(value: str | None, default: bool) -> bool:
    if value is None or value.strip() == "":
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


def _number(env: Mapping[str, str], name: str, default: float | None, kind: type = float) -> float | None:
    value = env.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        return kind(value)
    except ValueError:
        from .errors import ConfigurationError

        raise ConfigurationError(f"{name}={value!r} is not a{'n integer' if kind is int else ' number'}") from None


@dataclass(frozen=True)
class JudgeSettings:
    """How the judge is reached and how it scores. `model` None: no judge."""

    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    base_url: str | None = None
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
    embedding_model: str = "text-embedding-3-small"

    @property
    def configured(self) -> bool:
        return bool(self.model)


@dataclass(frozen=True)
class PriceSettings:
    refresh: bool = True
    url: str = DEFAULT_PRICES_URL
    ttl_seconds: float = 86400.0


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
    neo4j_retry_seconds: float = 30.0
    graph_retries: int = 3
    graph_retry_wait_seconds: float = 10.0
    #: the broker of the session queue, as an AMQP URL (it holds the password)
    rabbitmq_url: str = field(default="amqp://guest:guest@127.0.0.1:5672/%2F", repr=False)
    session_queue: str = "new_session_to_mce"
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
            neo4j_retry_seconds=_bounded(env, "NEO4J_RETRY_SECONDS", 30.0, float, 0.0),
            graph_retries=_bounded(env, "MCE_GRAPH_RETRIES", 3, int, 0),
            graph_retry_wait_seconds=_bounded(env, "MCE_GRAPH_RETRY_WAIT_SECONDS", 10.0, float, 0.0),
            rabbitmq_url=_rabbitmq_url(env),
            session_queue=env.get("MCE_SESSION_QUEUE") or "new_session_to_mce",
            sensor_batch=_bounded(env, "MCE_SENSOR_BATCH", 500, int, 1),
            sensor_tick_seconds=_bounded(env, "MCE_SENSOR_TICK_SECONDS", 20.0, float, 1.0),
            sensor_interval=_bounded(env, "MCE_SENSOR_INTERVAL", 10, int, 1),
            announce_wait_seconds=_bounded(env, "MCE_ANNOUNCE_WAIT_SECONDS", 600.0, float, 0.0),
            api_token=env.get("MCE_API_TOKEN") or None,
            allowed_hosts=tuple(h.strip().lower() for h in (env.get("MCE_ALLOWED_HOSTS") or "").split(",") if h.strip()),
            max_request_bytes=_bounded(env, "MCE_MAX_REQUEST_BYTES", 1_048_576, int, 1024),
            query_results_kept=_bounded(env, "MCE_QUERY_RESULTS_KEPT", 200, int, 1),
            judge=_judge(env, home),
            prices=PriceSettings(
                refresh=_flag(env.get("MODEL_PRICES_REFRESH"), True),
                url=env.get("MODEL_PRICES_URL") or DEFAULT_PRICES_URL,
                ttl_seconds=float(_number(env, "MODEL_PRICES_TTL_SECONDS", 86400.0)),
            ),
            explicit=frozenset(name for name, _, _ in VARIABLES if env.get(name)),
        )


def _judge(env: Mapping[str, str], home: Path) -> JudgeSettings:
    from .errors import ConfigurationError

    samples = int(_number(env, "MCE_JUDGE_SAMPLES", 1, int))
    if samples < 1:
        raise ConfigurationError(f"MCE_JUDGE_SAMPLES={samples} must be 1 or more")
    cache = (env.get("MCE_JUDGE_CACHE") or "off").strip().lower()
    if cache not in JUDGE_CACHE_MODES:
        raise ConfigurationError(f"MCE_JUDGE_CACHE={cache!r} is not one of {', '.join(JUDGE_CACHE_MODES)}")
    concurrency = int(_number(env, "MCE_JUDGE_CONCURRENCY", 8, int))
    if concurrency < 1:
        raise ConfigurationError(f"MCE_JUDGE_CONCURRENCY={concurrency} must be 1 or more")
    return JudgeSettings(
        model=(env.get("LLM_MODEL_NAME") or "").strip() or None,
        api_key=env.get("OPENAI_API_KEY") or None,
        base_url=(env.get("LLM_BASE_MODEL_URL_MCE") or "").strip() or None,
        logprobs=_flag(env.get("MCE_JUDGE_LOGPROBS"), True),
        samples=samples,
        temperature=float(_number(env, "MCE_JUDGE_TEMPERATURE", 0.0 if samples == 1 else 0.7)),
        concurrency=concurrency,
        timeout=float(_number(env, "MCE_JUDGE_TIMEOUT", 60.0)),
        retries=int(_number(env, "MCE_JUDGE_RETRIES", 4, int)),
        max_tokens=int(_number(env, "MCE_JUDGE_MAX_TOKENS", 512, int)),
        cache=cache,
        cache_path=_path(env.get("MCE_JUDGE_CACHE_PATH")) or home / "judge-cache.sqlite",
        budget_usd=_number(env, "MCE_JUDGE_BUDGET_USD", None),
        embedding_model=(env.get("MCE_JUDGE_EMBEDDING_MODEL") or "").strip() or "text-embedding-3-small",
    )


def _neo4j_uri(env: Mapping[str, str]) -> str | None:
    if env.get("NEO4J_URI"):
        return env["NEO4J_URI"]
    host = env.get("KG_DB_HOST")
    if not host:
        return None
    return host if "://" in host else f"bolt://{host}:{env.get('KG_DB_PORT') or 7687}"


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


def _rabbitmq_url(env: Mapping[str, str]) -> str:
    if env.get("RABBITMQ_URL"):
        return env["RABBITMQ_URL"]
    from urllib.parse import quote

    user = quote(env.get("RABBITMQ_USER") or "guest", safe="")
    password = quote(env.get("RABBITMQ_PASSWORD") or "guest", safe="")
    host = env.get("RABBITMQ_HOST") or "127.0.0.1"
    vhost = quote(env.get("RABBITMQ_VHOST") or "/", safe="")
    return f"amqp://{user}:{password}@{host}:{env.get('RABBITMQ_PORT') or 5672}/{vhost}"


def _bounded(env: Mapping[str, str], name: str, default, kind, minimum):
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        from .errors import ConfigurationError

        raise ConfigurationError(f"{name}={raw!r} is not a number") from None
    if value < minimum:
        from .errors import ConfigurationError

        raise ConfigurationError(f"{name}={raw!r} is below its minimum {minimum}")
    return value


# -- env files (`mce --env-file PATH`) -------------------------------------------------

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# The only part of a malformed line an error shows: a name in upper case, as variables
# are written, followed by a space or a colon (`NEO4J_PASSWORD pw-...`). A word alone
# on its line, or one in mixed case, may be a pasted key.
_SHOWN_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}(?=[ \t:])")


def parse_env_file(text: str, source: str = "env file") -> dict[str, str]:
    """`NAME=value` lines -> {NAME: value}. Blank lines and `#` comments are skipped,
    a leading `export ` is allowed, and a value in matching single or double quotes
    is taken as it is inside them. Any other line is an error that names its number
    and the variable it starts with, never the value (it may be a password)."""
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        name, sep, value = line.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not _ENV_NAME.match(name):
            from .errors import ConfigurationError

            shown = _SHOWN_NAME.match(line)
            found = "no '='" if not sep else "something other than a variable name before the '='"
            raise ConfigurationError(
                f"{source}:{number}{f' ({shown.group()})' if shown else ''}: expected NAME=value, found {found}"
                " (the line is not shown: it may hold a secret)"
            )
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[name] = value
    return values


def load_env_file(path: Path | str) -> dict[str, str]:
    """Set the variables of an env file in this process's environment, over any
    already set (the file is what the command line asked for). Call it before
    anything reads the settings. Returns what was set."""
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
