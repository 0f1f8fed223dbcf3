"""A session as DeepEval's test cases take it, in plain data (the library's classes
are built from these in `library`). Pure."""

from __future__ import annotations

from dataclasses import dataclass

from ...core.context import Node, SessionContext
from ...core.metric import NotApplicable
from .. import ProviderOptions
from .. import cases as session_cases


@dataclass(frozen=True)
class SingleTurn:
    input: str
    actual_output: str
    tools_called: tuple[session_cases.ToolUseCase, ...] = ()
    expected_tools: tuple[str, ...] = ()
    retrieval_context: tuple[str, ...] = ()


def single_turn(entity: Node, ctx: SessionContext, options: ProviderOptions) -> SingleTurn:
    found = session_cases.exchange(ctx)
    return SingleTurn(found.input, found.output, retrieval_context=session_cases.retrieval_context(ctx))


def single_turn_with_tools(entity: Node, ctx: SessionContext, options: ProviderOptions) -> SingleTurn:
    found = session_cases.exchange(ctx)
    return SingleTurn(found.input, found.output, tools_called=session_cases.tool_uses(ctx))


def tool_correctness(entity: Node, ctx: SessionContext, options: ProviderOptions) -> SingleTurn | NotApplicable:
    """The tools called against the tools expected: from `mce_config.yaml`
    (`providers.expected_tools`), else the tools the session's definitions offer."""
    expected = options.tools_for(ctx) or session_cases.offered_tools(ctx)
    if not expected:
        return NotApplicable("no expected tools: none configured (providers.expected_tools) and the session defines none")
    found = session_cases.exchange(ctx)
    return SingleTurn(found.input, found.output, tools_called=session_cases.tool_uses(ctx), expected_tools=expected)


def conversational(entity: Node, ctx: SessionContext, options: ProviderOptions) -> session_cases.Conversation:
    return session_cases.conversation(ctx)


def role_adherence(entity: Node, ctx: SessionContext, options: ProviderOptions) -> session_cases.Conversation | NotApplicable:
    """A conversation whose role is the session's system prompt; none recorded: not applicable."""
    found = session_cases.conversation(ctx)
    if not found.role:
        return NotApplicable("the session records no system prompt to take the assistant's role from")
    return found
