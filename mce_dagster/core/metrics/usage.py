"""Token usage and its cost in USD, per LLM call and summed beneath an entity."""

from __future__ import annotations

from ..context import Node
from ..metric import EvaluationInput, MetricFailure, MetricValue, NotApplicable, Outcome, native_metric
from ..ontology import Label


def llm_call_tokens(call: Node) -> tuple[int, int, int, int]:
    """(total, prompt, completion, cache_read) of one LLM call. Total is the recorded
    total, else prompt + completion. Raises MetricFailure when no usage is recorded."""
    prompt = call.get("promptTokenCount")
    completion = call.get("completionTokenCount")
    total = call.get("totalTokenCount")
    cache_read = call.get("cacheReadTokenCount", 0)
    if total is None:
        if prompt is None and completion is None:
            raise MetricFailure(f"LLM call {call.id} records no token usage")
        total = (prompt or 0) + (completion or 0)
    return int(total), int(prompt or 0), int(completion or 0), int(cache_read or 0)


def llm_call_cost(call: Node, inp: EvaluationInput) -> tuple[float, str | None]:
    """USD of one LLM call, and the table entry used when its model was missing."""
    if inp.prices is None:
        raise MetricFailure("no price table was given")
    prompt = call.get("promptTokenCount")
    completion = call.get("completionTokenCount")
    if prompt is None and completion is None:
        raise MetricFailure(f"LLM call {call.id} records no prompt/completion token counts")
    prompt, completion = int(prompt or 0), int(completion or 0)
    # Cache-read tokens are part of the prompt; they are billed at the cache price
    # where the table has one, and at the input price otherwise.
    cache_read = min(int(call.get("cacheReadTokenCount", 0) or 0), prompt)
    price = inp.prices.price(call.get("modelName"), call.get("provider"))
    cache_price = price.input_per_token if price.cache_read_per_token is None else price.cache_read_per_token
    cost = (
        (prompt - cache_read) * price.input_per_token
        + cache_read * cache_price
        + completion * price.output_per_token
    )
    return cost, price.priced_as


def _sum_unknown(missing: list[str], calls: int, what: str) -> MetricFailure:
    """A sum over calls some of which record no usage is not the entity's usage."""
    return MetricFailure(
        f"{len(missing)} of {calls} LLM calls beneath record no {what} (first: {missing[0]}): the sum is not known"
    )


def _failed_without_usage(call: Node) -> NotApplicable | None:
    """A failed request (rate limit, server error) that records no usage produced
    nothing to count or bill; a successful call with no usage is a failure instead."""
    if call.success is False and all(
        call.get(key) is None for key in ("promptTokenCount", "completionTokenCount", "totalTokenCount")
    ):
        return NotApplicable(f"LLM call {call.id} failed and records no token usage")
    return None


@native_metric("TokenCount")
def token_count(entity: Node, inp: EvaluationInput) -> Outcome:
    if entity.label is Label.LLM_CALL:
        if skipped := _failed_without_usage(entity):
            return skipped
        total, prompt, completion, cache_read = llm_call_tokens(entity)
        return MetricValue(
            value=float(total),
            metadata={"prompt": prompt, "completion": completion, "cache_read": cache_read},
        )
    if unknown := inp.session.unknown_beneath(entity, Label.LLM_CALL):
        return NotApplicable(unknown)
    calls = inp.session.beneath(entity, Label.LLM_CALL)
    sums = [0, 0, 0, 0]
    missing: list[str] = []
    failed_without_usage = 0
    for call in calls:
        if _failed_without_usage(call):
            failed_without_usage += 1
            continue
        try:
            parts = llm_call_tokens(call)
        except MetricFailure:
            missing.append(call.id)
            continue
        sums = [a + b for a, b in zip(sums, parts)]
    if missing:
        raise _sum_unknown(missing, len(calls), "token usage")
    return MetricValue(
        value=float(sums[0]),
        reasoning=inp.session.inferred_note(entity, Label.LLM_CALL),
        metadata={
            "prompt": sums[1],
            "completion": sums[2],
            "cache_read": sums[3],
            "llm_calls": len(calls),
            "llm_calls_without_usage": failed_without_usage,
        },
    )


@native_metric("Cost")
def cost(entity: Node, inp: EvaluationInput) -> Outcome:
    if entity.label is Label.LLM_CALL:
        if skipped := _failed_without_usage(entity):
            return skipped
        value, priced_as = llm_call_cost(entity, inp)
        metadata = {"model": entity.get("modelName")}
        reasoning = None
        if priced_as:
            metadata["priced_as"] = priced_as
            reasoning = f"model {entity.get('modelName')!r} is not in the price table; priced as {priced_as}"
        return MetricValue(value=value, reasoning=reasoning, metadata=metadata)
    if unknown := inp.session.unknown_beneath(entity, Label.LLM_CALL):
        return NotApplicable(unknown)
    calls = inp.session.beneath(entity, Label.LLM_CALL)
    total = 0.0
    missing: list[str] = []
    failed_without_usage = 0
    priced_as: dict[str, str] = {}
    for call in calls:
        if _failed_without_usage(call):
            failed_without_usage += 1
            continue
        try:
            value, as_model = llm_call_cost(call, inp)
        except MetricFailure:
            if inp.prices is None:
                raise
            missing.append(call.id)
            continue
        total += value
        if as_model:
            priced_as[str(call.get("modelName"))] = as_model
    if missing:
        raise _sum_unknown(missing, len(calls), "prompt/completion token counts")
    notes = [n for n in [inp.session.inferred_note(entity, Label.LLM_CALL)] if n]
    if priced_as:
        notes.append(
            "not in the price table, priced as gpt-4o: " + ", ".join(sorted(priced_as))
        )
    metadata = {"llm_calls": len(calls), "llm_calls_without_usage": failed_without_usage}
    if priced_as:
        metadata["priced_as"] = priced_as
    return MetricValue(value=total, reasoning="; ".join(notes) or None, metadata=metadata)
