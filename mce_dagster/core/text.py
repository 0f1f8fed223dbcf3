"""The text a judge reads, taken from a session context: the first user request, the
final answer, the transcript, an agent's input and output, a tool call's evidence.

The text itself (the graph's `State` contents and LLM message lists) is loaded into
the context only when a judged metric runs (`SessionContext.text`); deterministic
metrics never see it. Pure: no I/O.

Traces carry text in whatever shape the SDK wrote it: plain strings, LangChain's
`{"inputs": {...}}` dumps, message lists. The readers below look for the usual
places and say `None` when they find nothing, so that a metric fails with "missing
input" instead of judging an empty string.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .context import Node, SessionContext
from .ontology import Label

# Bound on any one piece of evidence and on a whole transcript, in characters: a
# judge prompt stays well inside every model's context window.
ITEM_CHARS = 2_000
TRANSCRIPT_CHARS = 24_000

_USER_ROLES = ("user", "human")
_ANSWER_ROLES = ("assistant", "ai")
# Keys under which SDKs put the user's request, most specific first.
_QUERY_KEYS = ("user_query", "query_message", "question", "query", "user_input", "input", "request", "prompt", "message")


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    content: str
    tool_calls: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CallText:
    """The text of one call, as stored in the graph."""

    input: str | None = None
    output: str | None = None
    input_messages: tuple[Message, ...] = ()
    output_messages: tuple[Message, ...] = ()
    # The tool's definition (from its `Tool` node), for tool calls.
    tool_description: str | None = None
    tool_parameters: str | None = None


class TextNotLoaded(RuntimeError):
    """A judged metric ran on a context whose text was not read (a defect)."""


def parse_messages(raw: Any) -> tuple[Message, ...]:
    """A stored message list (JSON text or a list of dicts) as messages."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return (Message("unknown", raw),)
    if not isinstance(raw, list):
        return ()
    out = []
    for item in raw:
        if not isinstance(item, Mapping):
            continue
        calls = item.get("tool_calls") or ()
        out.append(
            Message(
                role=str(item.get("role") or "unknown").lower(),
                content=_as_text(item.get("content")) or "",
                tool_calls=tuple(str(c) for c in calls) if isinstance(calls, (list, tuple)) else (),
            )
        )
    return tuple(out)


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts: [{"type": "text", "text": ...}]
        parts = [p.get("text") if isinstance(p, Mapping) else str(p) for p in value]
        return "\n".join(p for p in parts if p)
    return json.dumps(value, ensure_ascii=False)


def _meaningful(text: str | None) -> str | None:
    """The text, unless it is empty or an empty JSON string (`""`)."""
    if text is None:
        return None
    stripped = text.strip()
    if stripped in ("", '""', "''", "null", "{}", "[]"):
        return None
    return stripped


def _json(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return None


def _message_parts(message: Any) -> tuple[str | None, str | None]:
    """(role, content) of a message in any of the common shapes: `["user", "hi"]`,
    `{"role", "content"}`, LangChain's `{"kwargs": {"type": "human", "content"}}`."""
    if isinstance(message, (list, tuple)) and len(message) == 2 and isinstance(message[0], str):
        return message[0].lower(), _as_text(message[1])
    if isinstance(message, Mapping):
        inner = message.get("kwargs") if isinstance(message.get("kwargs"), Mapping) else message
        role = inner.get("role") or inner.get("type") or message.get("type")
        content = inner.get("content", inner.get("message"))
        return (str(role).lower() if role else None), _as_text(content)
    return None, None


def _query_in(value: Any, depth: int = 0) -> str | None:
    """The user's request inside a call's input, where SDKs usually put it."""
    if depth > 4 or not isinstance(value, Mapping):
        return None
    messages = value.get("messages")
    if isinstance(messages, list):
        for message in messages:
            role, content = _message_parts(message)
            if role in _USER_ROLES and _meaningful(content):
                return _meaningful(content)
    for key in _QUERY_KEYS:
        found = value.get(key)
        if isinstance(found, str) and _meaningful(found):
            return _meaningful(found)
        if isinstance(found, Mapping):
            _, content = _message_parts(found)
            if _meaningful(content):
                return _meaningful(content)
    for key in ("inputs", "input", "kwargs"):
        nested = value.get(key)
        if isinstance(nested, Mapping):
            found = _query_in(nested, depth + 1)
            if found:
                return found
    return None


def _require_text(ctx: SessionContext) -> Mapping[str, CallText]:
    if ctx.text is None:
        raise TextNotLoaded(f"the text of session {ctx.session_id} was not read from the graph")
    return ctx.text


def call_text(ctx: SessionContext, node: Node) -> CallText:
    return _require_text(ctx).get(node.id, CallText())


def _calls_in_order(ctx: SessionContext) -> list[Node]:
    nodes = [n for n in ctx.nodes.values() if n.label is not Label.SESSION]
    nodes.sort(key=lambda n: (n.start, n.id))
    return nodes


def first_user_request(ctx: SessionContext) -> str | None:
    """The session's first user request: from the earliest call whose input names
    one (a workflow's `messages`, `user_query`, `question`...), else the first user
    message sent to a model."""
    texts = _require_text(ctx)
    for node in _calls_in_order(ctx):
        found = _query_in(_json(texts.get(node.id, CallText()).input))
        if found:
            return found
    for node in ctx.calls(Label.LLM_CALL):
        for message in texts.get(node.id, CallText()).input_messages:
            if message.role in _USER_ROLES and _meaningful(message.content):
                return _meaningful(message.content)
    return None


def llm_answer(text: CallText) -> str | None:
    """What a model call answered: its last assistant message with content."""
    for message in reversed(text.output_messages):
        if message.role in (*_ANSWER_ROLES, "unknown") and _meaningful(message.content):
            return _meaningful(message.content)
    return None


def final_answer(ctx: SessionContext) -> str | None:
    """The session's final answer: the last model reply with content (a reply that
    only calls tools, or routes to the next agent, is not an answer)."""
    texts = _require_text(ctx)
    for node in sorted(ctx.calls(Label.LLM_CALL), key=lambda n: (n.end, n.start, n.id), reverse=True):
        answer = llm_answer(texts.get(node.id, CallText()))
        if answer:
            return answer
    return None


def llm_call_qa(ctx: SessionContext, call: Node) -> tuple[str | None, str | None]:
    """(request, answer) of one model call: its last user message and its reply."""
    text = call_text(ctx, call)
    request = next(
        (_meaningful(m.content) for m in reversed(text.input_messages) if m.role in _USER_ROLES and _meaningful(m.content)),
        None,
    )
    return request, llm_answer(text)


def clip(text: str | None, limit: int = ITEM_CHARS) -> str:
    """At most `limit` characters, keeping the head and the tail."""
    if text is None:
        return ""
    text = text.strip()
    if len(text) <= limit:
        return text
    half = (limit - 40) // 2
    return f"{text[:half]} [... {len(text) - 2 * half} characters left out ...] {text[-half:]}"


@dataclass(frozen=True)
class Transcript:
    text: str
    entries: int
    truncated: bool


def _entries(ctx: SessionContext) -> Iterable[tuple[float, str]]:
    texts = _require_text(ctx)
    request = first_user_request(ctx)
    if request:
        yield (ctx.session.start, f"user: {clip(request)}")
    for node in _calls_in_order(ctx):
        text = texts.get(node.id, CallText())
        if node.label is Label.AGENT_CALL:
            name = node.get("agentName") or node.name
            if _meaningful(text.input):
                yield (node.start, f"hand-off to agent {name}: {clip(text.input)}")
            else:
                yield (node.start, f"hand-off to agent {name}")
            if _meaningful(text.output):
                yield (node.end, f"agent {name} returned: {clip(text.output)}")
        elif node.label is Label.LLM_CALL:
            agent = ctx.nearest_agent(node)
            who = f"model in agent {agent.get('agentName') or agent.name}" if agent else "model"
            answer = llm_answer(text)
            calls = [c for m in text.output_messages for c in m.tool_calls]
            if answer:
                yield (node.end, f"{who}: {clip(answer)}")
            if calls:
                yield (node.end, f"{who} calls tools: {', '.join(calls)}")
        elif node.label is Label.TOOL_CALL:
            name = node.get("toolName") or node.name
            args = node.get("toolArguments") or text.input
            result = text.output if _meaningful(text.output) else None
            status = "failed: " + str(node.get("errorMessage") or "") if node.success is False else "returned"
            yield (node.end, f"tool {name}({clip(args, 500)}) {status} {clip(result) if result else '(no output)'}")


def transcript(ctx: SessionContext, limit: int = TRANSCRIPT_CHARS) -> Transcript:
    """The session as ordered lines: the request, agent hand-offs, model replies and
    tool calls. A transcript longer than `limit` keeps its head and tail."""
    lines = [line for _, line in sorted(_entries(ctx), key=lambda e: e[0])]
    body = "\n".join(f"[{i + 1}] {line}" for i, line in enumerate(lines))
    truncated = len(body) > limit
    return Transcript(clip(body, limit) if truncated else body, len(lines), truncated)


def agent_io(ctx: SessionContext, agent: Node) -> tuple[str | None, str | None]:
    text = call_text(ctx, agent)
    return _meaningful(text.input), _meaningful(text.output)


@dataclass(frozen=True)
class ToolUse:
    name: str
    definition: str | None
    arguments: str | None
    output: str | None
    request: str | None
    failed: bool
    error: str | None


def tool_use(ctx: SessionContext, tool: Node) -> ToolUse:
    """What a judge needs to grade one tool call: the tool, its definition, the
    arguments, the output, and the request that led to it (the last user message
    the model that chose the tool saw, else the session's request)."""
    text = call_text(ctx, tool)
    definition = None
    if text.tool_description or text.tool_parameters:
        definition = "\n".join(p for p in (text.tool_description, text.tool_parameters and f"parameters: {text.tool_parameters}") if p)
    request = None
    earlier = [c for c in ctx.calls(Label.LLM_CALL) if c.start <= tool.start]
    for call in reversed(earlier):
        request, _ = llm_call_qa(ctx, call)
        if request:
            break
    return ToolUse(
        name=tool.get("toolName") or tool.name,
        definition=definition,
        arguments=_meaningful(tool.get("toolArguments")) or _meaningful(text.input),
        output=_meaningful(text.output),
        request=request or first_user_request(ctx),
        failed=tool.success is False,
        error=tool.get("errorMessage"),
    )
