"""A session as the inputs evaluation libraries take, library-neutral: a single-turn
exchange, a multi-turn conversation with its tool calls, the tool calls with their
arguments and outputs, the tools the session offered, its retrieval context. Each
provider maps these onto its own test-case classes. Pure: read from the session's
text (`core.text`), which must be loaded.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from typing import Any

from ..core import text as session_text
from ..core.context import SessionContext
from ..core.metric import MetricFailure
from ..core.ontology import Label

_USER = ("user", "human")
_ASSISTANT = ("assistant", "ai", "unknown")
# Tool names whose output is retrieved context (RAG), lower-cased substrings.
_RETRIEVAL = ("retriev", "search", "lookup", "rag", "knowledge", "vector", "docs")


@dataclass(frozen=True)
class Exchange:
    input: str
    output: str


@dataclass(frozen=True)
class ToolUseCase:
    name: str
    arguments: dict[str, Any]
    output: str | None
    failed: bool = False


@dataclass(frozen=True)
class Turn:
    role: str  # "user" or "assistant"
    content: str
    tools: tuple[ToolUseCase, ...] = ()


@dataclass(frozen=True)
class Conversation:
    turns: tuple[Turn, ...]
    # What the system was asked to be: the first system prompt a model saw.
    role: str | None = None
    tools_called: tuple[ToolUseCase, ...] = field(default=())


def exchange(ctx: SessionContext) -> Exchange:
    """The first user request and the final answer; a missing one is a MetricFailure."""
    request = session_text.first_user_request(ctx)
    answer = session_text.final_answer(ctx)
    if request is None:
        raise MetricFailure("missing input: no user request found in the session")
    if answer is None:
        raise MetricFailure("missing input: no final answer found in the session")
    return Exchange(request, answer)


def _mapping(text: str) -> dict[str, Any] | None:
    """A JSON object, or a Python dict literal (LangChain writes `str(dict)`)."""
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(text)
        except (ValueError, SyntaxError, TypeError):
            continue
        if isinstance(value, dict):
            return value
    return None


def arguments_of(raw: str | None) -> dict[str, Any]:
    """A tool call's arguments as a mapping. SDK wrappers are taken off: a call
    recorded as `{"args": [...], "kwargs": {...}}` has the kwargs (and the positional
    args, if any, under `args`); LangChain's `{"input_str": "{...}"}` has the dict
    it holds. Anything that is not a mapping is kept under `input`."""
    if not raw:
        return {}
    value = _mapping(raw)
    if value is None:
        return {"input": raw}
    if set(value) <= {"args", "kwargs"} and isinstance(value.get("kwargs", {}), dict):
        out = dict(value.get("kwargs") or {})
        if value.get("args"):
            out["args"] = value["args"]
        return out
    if isinstance(value.get("input_str"), str):
        inner = _mapping(value["input_str"])
        return inner if inner is not None else {"input": value["input_str"]}
    return value


def expected_call(entry: str) -> tuple[str, dict[str, Any]]:
    """An expected tool as configured: `name`, or `name {"argument": value}`."""
    name, _, args = entry.strip().partition(" ")
    if not args.strip():
        return name, {}
    try:
        parsed = json.loads(args)
    except ValueError:
        raise MetricFailure(f"expected tool {entry!r}: the arguments after the name are not a JSON object") from None
    if not isinstance(parsed, dict):
        raise MetricFailure(f"expected tool {entry!r}: the arguments after the name are not a JSON object")
    return name, parsed


def tool_uses(ctx: SessionContext) -> tuple[ToolUseCase, ...]:
    """Every tool call of the session in order, with its arguments and output."""
    calls = sorted(ctx.calls(Label.TOOL_CALL), key=lambda n: (n.start, n.id))
    out = []
    for node in calls:
        use = session_text.tool_use(ctx, node)
        out.append(ToolUseCase(use.name, arguments_of(use.arguments), use.output or (use.error if use.failed else None), use.failed))
    return tuple(out)


def offered_tools(ctx: SessionContext) -> tuple[str, ...]:
    """The tools the session's definitions describe (a `Tool` node's description or
    parameters), by name, in order of first use."""
    names: list[str] = []
    for node in sorted(ctx.calls(Label.TOOL_CALL), key=lambda n: (n.start, n.id)):
        text = session_text.call_text(ctx, node)
        name = node.get("toolName") or node.name
        if (text.tool_description or text.tool_parameters) and name not in names:
            names.append(name)
    return tuple(names)


def retrieval_context(ctx: SessionContext) -> tuple[str, ...]:
    """Outputs of the session's retrieval tools (by name), if any."""
    return tuple(
        use.output
        for use in tool_uses(ctx)
        if use.output and not use.failed and any(k in use.name.lower() for k in _RETRIEVAL)
    )


def conversation(ctx: SessionContext) -> Conversation:
    """The session as turns: every distinct user message the models were sent and
    every model reply, in time order, each assistant turn with the tool calls made
    after it and before the next turn. A session with no user turn or no assistant
    turn is a MetricFailure (missing input)."""
    texts = session_text  # the readers below need the text loaded
    calls = sorted(ctx.calls(Label.LLM_CALL), key=lambda n: (n.start, n.id))
    tools = sorted(ctx.calls(Label.TOOL_CALL), key=lambda n: (n.start, n.id))
    seen_user: set[str] = set()
    timeline: list[tuple[float, int, Turn]] = []
    role = None
    request = texts.first_user_request(ctx)
    for call in calls:
        text = texts.call_text(ctx, call)
        for message in text.input_messages:
            content = (message.content or "").strip()
            if message.role == "system" and role is None and content:
                role = content
            if message.role in _USER and content and content not in seen_user:
                seen_user.add(content)
                timeline.append((call.start, 0, Turn("user", content)))
        answer = texts.llm_answer(text)
        requested = [c for m in text.output_messages for c in m.tool_calls]
        if answer or requested:
            timeline.append((call.end, 1, Turn("assistant", answer or f"(calls {', '.join(requested)})")))
    if request and request not in seen_user:
        timeline.append((ctx.session.start, -1, Turn("user", request)))
    timeline.sort(key=lambda t: (t[0], t[1]))
    turns = [t for _, _, t in timeline]
    times = [at for at, _, _ in timeline]
    uses = tool_uses(ctx)
    attached: dict[int, list[ToolUseCase]] = {}
    for node, use in zip(tools, uses):
        # the latest assistant turn at or before the tool started requested it
        index = next((i for i in range(len(turns) - 1, -1, -1) if turns[i].role == "assistant" and times[i] <= node.start), None)
        if index is None:
            index = next((i for i, t in enumerate(turns) if t.role == "assistant"), None)
        if index is not None:
            attached.setdefault(index, []).append(use)
    turns = [Turn(t.role, t.content, tuple(attached.get(i, ()))) for i, t in enumerate(turns)]
    if not any(t.role == "user" for t in turns):
        raise MetricFailure("missing input: the session has no user turn")
    if not any(t.role == "assistant" for t in turns):
        raise MetricFailure("missing input: the session has no assistant turn")
    return Conversation(tuple(turns), role=role, tools_called=uses)
