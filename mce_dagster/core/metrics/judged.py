"""The native judged metrics (docs/metrics.md), in two pure halves around the
judge's calls:

1. `judge_task` turns an entity into the prompt to send (its rubric and evidence),
   or says the metric does not apply, or fails for a missing input (an empty
   transcript, a tool call without output): no call is made for those.
2. `judged`, the metric function every native `llm_judge` definition uses, reads
   the judge's replies for the entity (`EvaluationInput.judgments`) and turns them
   into a value with its cost, or fails with the reason.

Which evidence a metric reads is its definition's `judge.input`: `qa`, `transcript`,
`agent_io`, `tool_call`.
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import text as session_text
from ..context import Node, SessionContext
from ..injection import suspected_injection
from ..judging import JudgeTask, build_messages, judged_value
from ..metric import EvaluationInput, MetricFailure, NotApplicable, Outcome
from ..ontology import Label

NO_JUDGE = (
    "no judge model is configured: set LLM_MODEL_NAME (for example openai/gpt-4o-mini) and its key "
    "(OPENAI_API_KEY), and LLM_BASE_MODEL_URL_MCE for an OpenAI-compatible endpoint"
)


def _missing(what: str) -> MetricFailure:
    return MetricFailure(f"missing input: {what}")


def _qa(entity: Node, ctx: SessionContext) -> dict[str, str] | NotApplicable:
    if entity.label is Label.LLM_CALL:
        request, answer = session_text.llm_call_qa(ctx, entity)
        if answer is None:
            calls = [c for m in session_text.call_text(ctx, entity).output_messages for c in m.tool_calls]
            if calls or entity.success is False:
                return NotApplicable("the call's reply has no text to judge (tool calls only, or the call failed)")
            raise _missing(f"LLM call {entity.id} has no reply text")
        if request is None:
            raise _missing(f"LLM call {entity.id} has no user message")
        return {"request": session_text.clip(request), "answer": session_text.clip(answer)}
    request = session_text.first_user_request(ctx)
    answer = session_text.final_answer(ctx)
    if request is None:
        raise _missing("no user request found in the session")
    if answer is None:
        raise _missing("no final answer found in the session")
    return {"request": session_text.clip(request), "answer": session_text.clip(answer)}


def _transcript(entity: Node, ctx: SessionContext) -> dict[str, str]:
    found = session_text.transcript(ctx)
    if found.entries == 0 or not found.text.strip():
        raise _missing("the session's transcript is empty")
    evidence = {}
    request = session_text.first_user_request(ctx)
    if request:
        evidence["request"] = session_text.clip(request)
    evidence["transcript"] = found.text
    answer = session_text.final_answer(ctx)
    if answer:
        evidence["final answer"] = session_text.clip(answer)
    return evidence


def _agent_io(entity: Node, ctx: SessionContext) -> dict[str, str]:
    given, returned = session_text.agent_io(ctx, entity)
    name = entity.get("agentName") or entity.name
    if given is None:
        raise _missing(f"agent call {entity.id} ({name}) records no input")
    if returned is None:
        raise _missing(f"agent call {entity.id} ({name}) records no output")
    return {"agent": name, "delegated input": session_text.clip(given), "agent output": session_text.clip(returned)}


def _tool_call(entity: Node, ctx: SessionContext) -> dict[str, str]:
    use = session_text.tool_use(ctx, entity)
    output = use.output or (f"(the call failed: {use.error})" if use.failed and use.error else None)
    if output is None:
        raise _missing(f"tool call {entity.id} ({use.name}) has no output")
    evidence = {"request": session_text.clip(use.request) if use.request else "(not recorded)", "tool": use.name}
    if use.definition:
        evidence["tool definition"] = session_text.clip(use.definition, 1500)
    evidence["arguments"] = session_text.clip(use.arguments, 1500) if use.arguments else "(none recorded)"
    evidence["output"] = session_text.clip(output)
    return evidence


_EVIDENCE = {"qa": _qa, "transcript": _transcript, "agent_io": _agent_io, "tool_call": _tool_call}


def judge_task(definition, entity: Node, ctx: SessionContext) -> JudgeTask | NotApplicable:
    """The prompt for one entity, NotApplicable, or a MetricFailure (missing input)."""
    spec = definition.judge
    if spec is None:
        raise MetricFailure(f"{definition.name} has no judge specification")
    evidence = _EVIDENCE[spec.input](entity, ctx)
    if isinstance(evidence, NotApplicable):
        return evidence
    flags: dict[str, object] = {}
    planted = suspected_injection(evidence)
    if planted:
        flags["suspected_injection"] = planted
    return JudgeTask(
        session_id=ctx.session_id,
        entity_id=entity.id,
        metric=definition.name,
        messages=build_messages(definition.name, spec.rubric, evidence),
        flags=flags,
    )


def judged(entity: Node, inp: EvaluationInput) -> Outcome:
    """Every native judged metric: the judge's replies for this entity as a value.
    With no judge (no judgments at all) every entity fails with that reason, as in a
    Dagster run without a model; no text is needed to say so."""
    judgments: Mapping[str, object] | None = inp.judgments
    if judgments is None:
        raise MetricFailure(NO_JUDGE)
    task = judge_task(inp.definition, entity, inp.session)
    if isinstance(task, NotApplicable):
        return task
    judgment = judgments.get(entity.id)
    if judgment is None:
        raise MetricFailure("no judge call was made for this entity")
    return judged_value(judgment, inp.prices, task.flags)
