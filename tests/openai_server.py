"""A local OpenAI-compatible chat-completions server for the judge's tests, so that
LiteLLM's real client path (HTTP, parsing, error mapping) runs with no key and no
network.

Replies are scripted: a `responder(request) -> Reply` decides each answer (a
completion with log-probabilities and usage, or the error bodies real providers
send: 400 for an unsupported parameter, 429 with Retry-After, 500, or a reply
slower than the client's timeout). Every request body is kept in `requests`.
`latency` delays every reply by a fixed number of seconds, as a model's time to
answer would (benchmarks of concurrent calls).

Structured requests are answered as the real API answers them, from the schema the
request carries: `response_format: json_schema` gets a JSON instance of that schema
as the message content, a forced tool (`tools` with `tool_choice`) gets a tool call
whose arguments are such an instance, and `response_format: json_object` (the JSON
mode of clients such as instructor, which put the schema in the prompt) gets an
instance of the schema the prompt holds. A plain request whose prompt asks for JSON
shaped like an example it shows (DeepEval's G-Eval: "Example JSON: {...}") gets
that example back, as a model following the prompt would. `values` fixes what
chosen properties are filled with (`{"verdict": "no"}`), so a test can steer a library's score.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Completion:
    text: str
    # Top log-probabilities at the score's digit: digit -> probability (not log).
    score_probs: Mapping[str, float] | None = None
    prompt_tokens: int = 100
    completion_tokens: int = 20
    delay: float = 0.0
    # A forced tool's call: (name, arguments as JSON text); the content is then empty.
    tool_call: tuple[str, str] | None = None


@dataclass
class Error:
    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0


Reply = Completion | Error
Responder = Callable[[dict[str, Any]], Reply]

# What OpenAI answers a model that does not take the parameter.
LOGPROBS_UNSUPPORTED = Error(
    400,
    "This model does not support the 'logprobs' parameter.",
    param="logprobs",
    code="unsupported_parameter",
)
RATE_LIMITED = Error(429, "Rate limit reached for requests", type="requests", code="rate_limit_exceeded", headers={"Retry-After": "1"})
SERVER_ERROR = Error(500, "The server had an error while processing your request.", type="server_error")


def tokens_of(text: str) -> list[str]:
    """Split like a tokenizer would, roughly: words, digits, spaces and punctuation."""
    return re.findall(r"\s+|\d|\w+|[^\w\s]", text)


def logprobs_content(text: str, score_probs: Mapping[str, float] | None) -> list[dict[str, Any]]:
    """OpenAI's `logprobs.content` for the text: probability 1 everywhere, except at
    the last digit following `Score:`, whose top alternatives are `score_probs`."""
    tokens = tokens_of(text)
    score_index = None
    match = list(re.finditer(r"Score:\s*(\d)", text))
    if match:
        offset = match[-1].start(1)
        position = 0
        for i, tok in enumerate(tokens):
            if position == offset:
                score_index = i
            position += len(tok)
    out = []
    for i, tok in enumerate(tokens):
        entry = {"token": tok, "logprob": 0.0, "bytes": list(tok.encode()), "top_logprobs": [{"token": tok, "logprob": 0.0, "bytes": list(tok.encode())}]}
        if i == score_index and score_probs:
            top = sorted(score_probs.items(), key=lambda kv: -kv[1])
            entry["top_logprobs"] = [
                {"token": d, "logprob": math.log(p) if p > 0 else -9999.0, "bytes": list(d.encode())} for d, p in top
            ]
            entry["logprob"] = math.log(score_probs.get(tok, 1e-9)) if score_probs.get(tok, 0) > 0 else -20.0
        out.append(entry)
    return out


def approx_tokens(text: str) -> int:
    """About four characters a token, as OpenAI's tokenizers average on English."""
    return max(1, len(text) // 4)


def prompt_tokens_of(request: Mapping[str, Any]) -> int:
    return approx_tokens(json.dumps(request.get("messages") or [], ensure_ascii=False))


def instance_of(schema: Mapping[str, Any], values: Mapping[str, Any] | None = None, *, root: Mapping[str, Any] | None = None, name: str = "value", items: int = 2) -> Any:
    """A JSON value valid against `schema` (the subset pydantic emits: $ref, anyOf,
    enum, const, objects, arrays, scalars); `values` fixes properties by name."""
    root = root if root is not None else schema
    values = values or {}
    if name in values:
        return values[name]
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        return instance_of(target, values, root=root, name=name, items=items)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            options = [o for o in schema[key] if o.get("type") != "null"] or schema[key]
            return instance_of(options[0], values, root=root, name=name, items=items)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or "properties" in schema:
        return {k: instance_of(v, values, root=root, name=k, items=items) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        count = max(items, int(schema.get("minItems") or 0))
        if schema.get("maxItems") is not None:
            count = min(count, int(schema["maxItems"]))
        return [instance_of(schema.get("items") or {}, values, root=root, name=name, items=items) for _ in range(count)]
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1.0))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return f"{name} as the evaluator sees it"


def _text_of(message: Mapping[str, Any]) -> str | None:
    """A message's text, its parts joined when it has several."""
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else None


def _schema_in_prompt(request: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The JSON schema a JSON-mode prompt carries (after `json_schema:`), if any."""
    for message in reversed(request.get("messages") or []):
        content = _text_of(message)
        if content is None or "json_schema" not in content:
            continue
        start = content.find("{", content.find("json_schema"))
        if start < 0:
            continue
        try:
            found, _ = json.JSONDecoder().raw_decode(content[start:])
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return None


def _example_in_prompt(request: Mapping[str, Any]) -> dict[str, Any] | None:
    """The example object a prompt asking for JSON shows ("Example JSON: {...}"), if any."""
    messages = request.get("messages") or []
    content = _text_of(messages[-1]) if messages else None
    if content is None or "Example JSON" not in content:
        return None
    start = content.find("{", content.rfind("Example JSON"))
    try:
        found, _ = json.JSONDecoder().raw_decode(content[start:]) if start >= 0 else (None, 0)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def structured(request: Mapping[str, Any], values: Mapping[str, Any] | None = None) -> Completion | None:
    """The reply to a structured request, filled from its schema; None when the
    request asks for plain text."""
    fmt = request.get("response_format") or {}
    tools = request.get("tools") or []
    choice = request.get("tool_choice")
    if fmt.get("type") == "json_schema":
        text = json.dumps(instance_of(fmt["json_schema"].get("schema") or {}, values))
    elif tools and choice not in (None, "none", "auto"):
        function = tools[0]["function"]
        if isinstance(choice, dict):
            wanted = choice.get("function", {}).get("name")
            function = next((t["function"] for t in tools if t["function"]["name"] == wanted), function)
        arguments = json.dumps(instance_of(function.get("parameters") or {}, values))
        return Completion("", prompt_tokens=prompt_tokens_of(request), completion_tokens=approx_tokens(arguments), tool_call=(function["name"], arguments))
    elif fmt.get("type") == "json_object":
        schema = _schema_in_prompt(request)
        if schema is None:
            return None
        text = json.dumps(instance_of(schema, values))
    elif (example := _example_in_prompt(request)) is not None:
        text = json.dumps({key: (values or {}).get(key, value) for key, value in example.items()})
    else:
        return None
    return Completion(text, prompt_tokens=prompt_tokens_of(request), completion_tokens=approx_tokens(text))


class _Server(ThreadingHTTPServer):
    # socketserver's default backlog of 5 drops connections beyond it when many
    # clients connect at once, and each dropped one waits a second to retry.
    request_queue_size = 128
    daemon_threads = True


class FakeOpenAI:
    """`with FakeOpenAI(responder) as server:`; `server.base_url` ends in /v1."""

    def __init__(self, responder: Responder | None = None, latency: float = 0.0):
        self.responder: Responder = responder or self.default_reply
        # Property name -> the value structured replies give it.
        self.values: dict[str, Any] = {}
        # Seconds added to every reply, on top of its own `delay`.
        self.latency = latency
        self.requests: list[dict[str, Any]] = []
        self.request_times: list[float] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    # -- scripting -------------------------------------------------------------

    def default_reply(self, request: dict[str, Any]) -> Reply:
        """A structured request gets an instance of its schema; any other a score."""
        return structured(request, self.values) or Completion("Fine.\nScore: 4", {"4": 1.0})

    def script(self, *replies: Reply, then: Responder | None = None) -> None:
        """Answer the next requests with `replies` in order, then with `then`."""
        queue = list(replies)
        after = then or self.responder

        def respond(req: dict[str, Any]) -> Reply:
            with self._lock:
                if queue:
                    return queue.pop(0)
            return after(req)

        self.responder = respond

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    # -- the server --------------------------------------------------------------

    def __enter__(self) -> "FakeOpenAI":
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.requests.append(body)
                    server.request_times.append(time.monotonic())
                if self.path.rstrip("/").endswith("/embeddings"):
                    return self._send(200, server.embeddings(body))
                if not self.path.rstrip("/").endswith("chat/completions"):
                    return self._send(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
                reply = server.responder(body)
                wait = server.latency + reply.delay
                if wait:
                    time.sleep(wait)
                if isinstance(reply, Error):
                    payload = {"error": {"message": reply.message, "type": reply.type, "param": reply.param, "code": reply.code}}
                    return self._send(reply.status, payload, reply.headers)
                self._send(200, server.completion(body, reply))

            def _send(self, status: int, payload: dict[str, Any], headers: Mapping[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                    pass

        self._server = _Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @staticmethod
    def embeddings(request: dict[str, Any], dimensions: int = 64) -> dict[str, Any]:
        """OpenAI's embeddings reply: one vector per input, a hashed bag of its words,
        so texts sharing words are close and unrelated ones are not."""
        texts = request.get("input") or []
        texts = [texts] if isinstance(texts, str) else texts
        data = []
        for i, text in enumerate(texts):
            vector = [0.0] * dimensions
            for word in re.findall(r"\w+", str(text).lower()):
                vector[zlib.crc32(word.encode()) % dimensions] += 1.0
            norm = math.sqrt(sum(v * v for v in vector)) or 1.0
            data.append({"object": "embedding", "index": i, "embedding": [v / norm for v in vector]})
        tokens = sum(approx_tokens(str(t)) for t in texts)
        return {"object": "list", "data": data, "model": request.get("model", "local"), "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    @staticmethod
    def completion(request: dict[str, Any], reply: Completion) -> dict[str, Any]:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": reply.text},
            "finish_reason": "stop",
            "logprobs": None,
        }
        if reply.tool_call is not None:
            name, arguments = reply.tool_call
            choice["message"] = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "call_local", "type": "function", "function": {"name": name, "arguments": arguments}}],
            }
            choice["finish_reason"] = "tool_calls"
        if request.get("logprobs"):
            choice["logprobs"] = {"content": logprobs_content(reply.text, reply.score_probs)}
        return {
            "id": "chatcmpl-local",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", "local"),
            "choices": [choice],
            "usage": {
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
                "total_tokens": reply.prompt_tokens + reply.completion_tokens,
            },
        }
