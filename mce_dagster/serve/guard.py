"""What stands in front of both HTTP servers (the REST API and MCP over HTTP): who
may call them, by which address, with how much.

- The address they are served on: loopback unless a token is set (`check_bind`).
- `Host` must be a name they answer to: the loopback names with the served port,
  the address they are bound to, and `MCE_ALLOWED_HOSTS`; anything else is 421,
  so a web page that rebinds its own name to 127.0.0.1 gets nothing. A browser's
  `Origin`, when sent, must name one of them too (403 otherwise).
- With `MCE_API_TOKEN` set, every request but the liveness probe (`/healthz`)
  carries `Authorization: Bearer TOKEN` (401 otherwise).
- A request body over `MCE_MAX_REQUEST_BYTES` is refused with 413: at once when
  its Content-Length says so, else as soon as the bytes received pass the limit.

The token is compared in constant time and never logged, echoed or put in a reply.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigurationError
from ..settings import Settings

LIVENESS_PATH = "/healthz"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
#: a token shorter than this is refused at start-up: it could be guessed
MIN_TOKEN_LENGTH = 16

# What one request may carry, wherever ids and names enter (body fields, path
# parameters, tool arguments).
MAX_ID_LENGTH = 256
MAX_NAME_LENGTH = 256
MAX_METRICS_PER_REQUEST = 200
MAX_SESSIONS_PER_REQUEST = 10_000
MAX_TIME_LENGTH = 64
MAX_TEXT_LENGTH = 20_000


def is_loopback(address: str) -> bool:
    if address.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(address: str, settings: Settings) -> None:
    """Refuse to serve where it is not safe: beyond loopback without a token, or
    with a token too short to be a secret."""
    token = settings.api_token
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise ConfigurationError(
            f"MCE_API_TOKEN is shorter than {MIN_TOKEN_LENGTH} characters: set a random one, "
            "as from python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    if token is None and not is_loopback(address):
        raise ConfigurationError(
            f"refusing to serve on {address}, which is not a loopback address, without MCE_API_TOKEN: "
            "anyone who reaches it could read every session and start paid runs. Set MCE_API_TOKEN "
            "(clients then send Authorization: Bearer TOKEN), or serve on 127.0.0.1 behind a reverse proxy."
        )


def _split_host(host: str) -> tuple[str, str | None]:
    """`name[:port]` -> (name, port); an IPv6 name keeps its brackets."""
    if host.startswith("["):
        name, _, rest = host.partition("]")
        return name + "]", rest[1:] if rest.startswith(":") else None
    name, colon, port = host.rpartition(":")
    return (name, port) if colon else (host, None)


@dataclass(frozen=True)
class AllowedHosts:
    """The `Host` values a server answers to. An entry with a port matches that
    exactly; an entry without one matches the name with any port or none."""

    entries: frozenset[str]

    @classmethod
    def for_server(cls, address: str, port: int, configured: Iterable[str] = ()) -> "AllowedHosts":
        names = set(LOOPBACK_NAMES)
        unspecified = address in ("0.0.0.0", "::", "")
        if not unspecified:
            names.add(f"[{address.strip('[]')}]" if ":" in address else address)
        entries = {f"{name.lower()}:{port}" for name in names}
        entries.update(h.strip().lower() for h in configured if h.strip())
        return cls(frozenset(entries))

    def allows(self, host: str | None) -> bool:
        if not host:
            return False
        host = host.strip().lower()
        if host in self.entries:
            return True
        name, _ = _split_host(host)
        return name in self.entries

    def allows_origin(self, origin: str) -> bool:
        if origin == "null":  # a sandboxed frame or a file: never one of ours
            return False
        try:
            parts = urlsplit(origin)
        except ValueError:
            return False
        return parts.scheme in ("http", "https") and self.allows(parts.netloc)

    def as_mcp_security(self) -> Any:
        """The same rule in the MCP SDK's terms, so its own check never refuses what
        this one let through."""
        from mcp.server.transport_security import TransportSecuritySettings

        hosts: list[str] = []
        for entry in sorted(self.entries):
            _, port = _split_host(entry)
            hosts += [entry] if port else [entry, f"{entry}:*"]
        origins = [f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")]
        return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


class _BodyTooLarge(Exception):
    pass


def _header(scope: dict[str, Any], name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value
    return None


class RequestGuard:
    """ASGI middleware, outermost: the Host and Origin check, the bearer token and
    the body limit, in that order, before the application sees the request."""

    def __init__(
        self,
        app: Any,
        *,
        allowed_hosts: AllowedHosts,
        token: str | None,
        max_body_bytes: int,
        open_paths: Iterable[str] = (LIVENESS_PATH,),
    ):
        self.app = app
        self.allowed_hosts = allowed_hosts
        self._expected = f"Bearer {token}".encode() if token else None
        self.max_body_bytes = max_body_bytes
        self.open_paths = frozenset(open_paths)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = _header(scope, b"host")
        if not self.allowed_hosts.allows(host.decode("latin-1") if host else None):
            await _reply(send, 421, "the Host header names an address this server does not answer to (see MCE_ALLOWED_HOSTS)")
            return
        origin = _header(scope, b"origin")
        if origin is not None and not self.allowed_hosts.allows_origin(origin.decode("latin-1")):
            await _reply(send, 403, "requests from a page of another origin are refused")
            return
        if self._expected is not None and scope.get("path") not in self.open_paths:
            given = _header(scope, b"authorization")
            if given is None:
                await _reply(send, 401, "a bearer token is required: Authorization: Bearer TOKEN", "Authorization",
                             {"www-authenticate": 'Bearer realm="mce"'})
                return
            if not self._token_matches(given):
                await _reply(send, 401, "the bearer token is not the one this server takes", "Authorization",
                             {"www-authenticate": 'Bearer realm="mce", error="invalid_token"'})
                return
        declared = _header(scope, b"content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > self.max_body_bytes:
            await self._too_large(send)
            return
        try:
            body_receive = await self._read_body(receive)
        except _BodyTooLarge:
            await self._too_large(send)
            return
        await self.app(scope, body_receive, send)

    def _token_matches(self, given: bytes) -> bool:
        scheme, _, token = given.strip().partition(b" ")
        # The scheme is case-insensitive (RFC 9110); the token is compared in constant time.
        return hmac.compare_digest(b"Bearer " + token.strip(), self._expected) and scheme.lower() == b"bearer"

    async def _read_body(self, receive: Any) -> Any:
        """The body, read here up to the limit and handed on whole: a chunked body
        that passes the limit is refused after at most the limit and one chunk."""
        chunks: list[bytes] = []
        size = 0
        pending: list[dict[str, Any]] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                pending.append(message)
                break
            size += len(message.get("body", b""))
            if size > self.max_body_bytes:
                raise _BodyTooLarge
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        pending.insert(0, {"type": "http.request", "body": b"".join(chunks), "more_body": False})

        async def replay() -> dict[str, Any]:
            return pending.pop(0) if pending else await receive()

        return replay

    async def _too_large(self, send: Any) -> None:
        # The connection is closed after the reply: the rest of the body is never read.
        await _reply(send, 413, f"the request body is over {self.max_body_bytes} bytes (MCE_MAX_REQUEST_BYTES)",
                     headers={"connection": "close"})


async def _reply(send: Any, status: int, error: str, field: str | None = None, headers: dict[str, str] | None = None) -> None:
    body = json.dumps({"error": error, "field": field}).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw_headers += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})


def guarded(app: Any, address: str, port: int, settings: Settings) -> RequestGuard:
    """`app` behind the guard, as served on address:port with these settings."""
    return RequestGuard(
        app,
        allowed_hosts=AllowedHosts.for_server(address, port, settings.allowed_hosts),
        token=settings.api_token,
        max_body_bytes=settings.max_request_bytes,
    )
