"""One synthetic session as span rows: a `LangGraph.workflow` root, agent
activations in the order the app's topology plans them, and inside each agent its
start/end event spans, LLM calls (sometimes wrapped in a `.task` span, retried
after a failure) and tool calls (some with an HTTP `POST` child).

Every choice is drawn from the one `random.Random` the builder is given, in a
fixed order: that order is what keeps a seed's rows the same, byte for byte.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from .tables import LLM_ERRORS, LLM_WRAPPERS, MODELS, THINKING, TOOLS, Agent, App, Model, Tool, ToolError

TOOL_FAILURE_RATE = 0.08
LLM_FAILURE_RATE = 0.02

# (ScopeName, ScopeVersion) of the instrumentations that emit each kind of span.
LANGCHAIN_SCOPE = ("opentelemetry.instrumentation.langchain", "0.43.1")
AGENT_SCOPE = ("ioa.observe.tracer", "")
EVENT_SCOPE = ("ioa_observe.sdk.decorators.base", "")
HTTP_SCOPE = ("opentelemetry.instrumentation.requests", "0.54b1")

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_YEAR_START_US = int((datetime(2025, 1, 1, tzinfo=timezone.utc) - _EPOCH).total_seconds()) * 1_000_000
_YEAR_US = 365 * 24 * 3600 * 1_000_000
_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _fill(template: str, **values: str) -> str:
    """`{name}` placeholders replaced; other braces (JSON) left alone."""
    for key, value in values.items():
        template = template.replace("{" + key + "}", value)
    return template


def _iso(us: int) -> str:
    return (_EPOCH + timedelta(microseconds=us)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _epoch_seconds(us: int) -> str:
    return f"{us // 1_000_000}.{us % 1_000_000:06d}"


def _uuid(rng: random.Random) -> uuid.UUID:
    return uuid.UUID(int=rng.getrandbits(128), version=4)


def _token(rng: random.Random, length: int) -> str:
    return "".join(rng.choices(_ALNUM, k=length))


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    """Durations are skewed: most calls are quick, a few are slow."""
    return min(high, max(low, round(math.exp(rng.uniform(math.log(low), math.log(high))))))


def _gap(rng: random.Random) -> int:
    """Framework overhead between two sibling spans, in µs."""
    return rng.randint(50, 3000)


def _pick_model(rng: random.Random) -> Model:
    return rng.choices(MODELS, weights=[m.weight for m in MODELS])[0]


def _plan_agents(rng: random.Random, app: App) -> list[str]:
    """The order in which agents are activated: 2 to 12 activations, with loops."""
    names = [a.name for a in app.agents]
    if app.topology == "supervisor":
        hub, workers = names[0], names[1:]
        cast = rng.sample(workers, rng.randint(1, len(workers)))
        sequence = [hub]
        worker = rng.choice(cast)
        for _ in range(rng.randint(1, 5)):
            # A supervisor often sends the same worker back to refine its work.
            if rng.random() < 0.45:
                worker = rng.choice(cast)
            sequence += [worker, hub]
        if rng.random() < 0.2:  # sometimes the last worker answers the user itself
            sequence.pop()
        return sequence
    if app.topology == "pipeline":
        stages = names[: rng.randint(2, len(names))]
        rounds = 1
        # Revision rounds: the whole pipeline runs again (A,B,C,A,B,C).
        while rng.random() < 0.4 and len(stages) * (rounds + 1) <= 12:
            rounds += 1
        return stages * rounds
    # "pair": a writer and a critic taking turns.
    sequence = names[:2] * rng.randint(1, 6)
    if len(sequence) < 12 and rng.random() < 0.6:
        sequence.append(names[0])
    return sequence


def _function_attrs(tools: Sequence[Tool]) -> dict[str, str]:
    attrs = {}
    for i, tool in enumerate(tools):
        schema = {"properties": {arg: {"type": "string"} for arg in tool.args}, "required": list(tool.args), "type": "object"}
        attrs[f"llm.request.functions.{i}.name"] = tool.name
        attrs[f"llm.request.functions.{i}.description"] = tool.description
        attrs[f"llm.request.functions.{i}.parameters"] = json.dumps(schema)
    return attrs


@dataclass(frozen=True)
class _ToolCall:
    tool: Tool
    args: dict[str, str]
    call_id: str


@dataclass(frozen=True)
class _Message:
    role: str
    content: str
    tool_call_id: str = ""


@dataclass(frozen=True)
class _LLMRequest:
    """What an agent asks of its model, and what the model answers (text or tool calls)."""

    agent: Agent
    tools: list[Tool]
    context: dict[str, str]
    prompt: list[_Message]
    text: str
    calls: list[_ToolCall]


class SessionRows:
    """Builds the rows of one session; times are integer microseconds since the epoch."""

    def __init__(self, rng: random.Random, app: App):
        self.rng = rng
        self.app = app
        self.session_id = f"{app.name}_{_uuid(rng)}"
        self.trace_id = f"{rng.getrandbits(128):032x}"
        self.topic = rng.choice(app.topics)
        self.request = _fill(rng.choice(app.requests), topic=self.topic)
        self.answer = _fill(rng.choice(app.answers), topic=self.topic)
        # Agents of one app usually share a model; some are configured with another.
        base = _pick_model(rng)
        self.models = {a.name: base if rng.random() < 0.6 else _pick_model(rng) for a in app.agents}
        self.temperatures = {a.name: rng.choice(("0", "0", "0.2", "0.7")) for a in app.agents}
        self.wrappers = {a.name: rng.choice(LLM_WRAPPERS) if rng.random() < 0.4 else None for a in app.agents}
        self.llm_calls = 0
        self.rows: list[tuple[int, dict[str, Any]]] = []  # (end, row)

    # -- rows

    def new_span_id(self) -> str:
        return f"{self.rng.getrandbits(63) + 1:016x}"

    def emit(
        self,
        span_id: str,
        parent_id: str,
        name: str,
        start: int,
        duration: int,
        attrs: dict[str, str],
        *,
        kind: str = "Internal",
        scope: tuple[str, str] = LANGCHAIN_SCOPE,
        status: str = "Unset",
        message: str = "",
        events: Sequence[tuple[str, int, dict[str, str]]] = (),
    ) -> int:
        attrs = {**attrs, "ioa_start_time": _epoch_seconds(start), "session.id": self.session_id}
        row = {
            "Timestamp": _iso(start),
            "TraceId": self.trace_id,
            "SpanId": span_id,
            "ParentSpanId": parent_id,
            "TraceState": "",
            "SpanName": name,
            "SpanKind": kind,
            "ServiceName": self.app.name,
            "ResourceAttributes": {"service.name": self.app.name},
            "ScopeName": scope[0],
            "ScopeVersion": scope[1],
            "SpanAttributes": dict(sorted(attrs.items())),  # ClickHouse maps come out sorted
            "Duration": duration * 1000,
            "StatusCode": status,
            "StatusMessage": message,
            "EventsTimestamp": [_iso(ts) for _, ts, _ in events],
            "EventsName": [event for event, _, _ in events],
            "EventsAttributes": [attributes for _, _, attributes in events],
            "LinksTraceId": [],
            "LinksSpanId": [],
            "LinksTraceState": [],
            "LinksAttributes": [],
        }
        self.rows.append((start + duration, row))
        return start + duration

    def raised(self, start: int, end: int, error_type: str, error_message: str, stack: str) -> dict[str, Any]:
        """What `emit` writes for a span that raised: Error status and an OTel
        exception event."""
        event_at = max(start, end - self.rng.randint(10, 200))
        exception = {
            "exception.type": error_type,
            "exception.message": error_message,
            "exception.stacktrace": f"Traceback (most recent call last):\n{stack}{error_type}: {error_message}\n",
        }
        return {"status": "Error", "message": f"{error_type}: {error_message}", "events": [("exception", event_at, exception)]}

    def ordered_rows(self) -> list[dict[str, Any]]:
        # Exporters write spans as they end: children before their parents.
        return [row for _, row in sorted(self.rows, key=lambda item: item[0])]

    # -- structure

    def run(self) -> list[dict[str, Any]]:
        rng = self.rng
        root_id = self.new_span_id()
        start = _YEAR_START_US + rng.randrange(_YEAR_US - 3_600_000_000)
        sequence = _plan_agents(rng, self.app)
        t = start + rng.randint(200, 3000)
        handoff: list[_Message] = []
        for step in range(len(sequence)):
            t, handoff = self.agent(sequence, step, root_id, t, handoff)
            t += _gap(rng)
        attrs = {
            "ioa_observe.workflow.name": self.app.name,
            "traceloop.span.kind": "workflow",
            "traceloop.entity.name": "LangGraph",
            "traceloop.workflow.name": "LangGraph",
            "traceloop.entity.input": json.dumps({"inputs": {"messages": [self.request]}, "tags": [], "metadata": {}, "kwargs": {"name": "LangGraph"}}),
            "traceloop.entity.output": json.dumps({"outputs": {"messages": [self.request, self.answer]}}),
        }
        self.emit(root_id, "", "LangGraph.workflow", start, t - start, attrs)
        return self.ordered_rows()

    def agent(
        self, sequence: list[str], step: int, parent_id: str, start: int, handoff: list[_Message]
    ) -> tuple[int, list[_Message]]:
        """One activation of an agent; returns its end and what it hands to the next one."""
        rng = self.rng
        agent = self.app.agent(sequence[step])
        is_last = step == len(sequence) - 1
        span_id = self.new_span_id()
        context = {
            "agent_id": agent.name,
            "ioa_observe.workflow.name": agent.name,
            "ioa_observe.association.properties.langgraph_node": agent.name,
            "ioa_observe.association.properties.langgraph_step": str(step + 1),
            "ioa_observe.association.properties.langgraph_path": json.dumps(["__pregel_pull", agent.name]),
            "ioa_observe.association.properties.langgraph_triggers": json.dumps([f"branch:to:{agent.name}"]),
            "ioa_observe.association.properties.langgraph_checkpoint_ns": f"{agent.name}:{_uuid(rng)}",
        }
        agent_event = {"agent_name": agent.name, "description": "", "type": "agent"}
        t = self.event(context, span_id, start + rng.randint(20, 300), "agent_start_event", agent_event) + _gap(rng)

        tools = [TOOLS[name] for name in agent.tools]
        n_tools = rng.choices(range(5), weights=(30, 30, 20, 12, 8))[0] if tools else 0
        n_llm = rng.choices((1, 2, 3), weights=(50, 35, 15))[0]
        if n_tools:  # every tool batch is requested by one LLM call and read by the next
            n_llm = max(n_llm, 2)
        batches = [0] * n_llm
        for _ in range(n_tools):
            batches[rng.randrange(n_llm - 1)] += 1

        messages = handoff
        text = ""
        for k in range(n_llm):
            calls = [self.plan_tool_call(rng.choice(tools), agent) for _ in range(batches[k])]
            if calls:
                text = ""
            elif k < n_llm - 1:
                text = _fill(rng.choice(THINKING), topic=self.topic)
            elif is_last:
                text = self.answer
            else:
                text = _fill(rng.choice(agent.notes), topic=self.topic, next=sequence[step + 1])
            prompt = [_Message("user", self.request), *messages]
            t = self.llm(_LLMRequest(agent, tools, context, prompt, text, calls), span_id, t) + _gap(rng)
            messages = [_Message("assistant", text)]
            if calls:
                messages = []
                for call in calls:
                    t, result = self.tool(context, span_id, t, call)
                    messages.append(result)
                    t += _gap(rng)

        t = self.event(context, span_id, t, "agent_end_event", {"agent_name": agent.name, "type": "agent"})
        end = t + rng.randint(20, 800)
        attrs = {
            **context,
            "ioa_observe.span.kind": "agent",
            "ioa_observe.entity.name": agent.name,
            "execution.success": "true",
            "agent_chain_start_time": _epoch_seconds(start + 40),
            "ioa_observe.entity.input": json.dumps({"args": [{"messages": [self.request]}], "kwargs": {}}),
            "ioa_observe.entity.output": json.dumps({"messages": [text]}),
        }
        self.emit(
            span_id, parent_id, f"{agent.name}.agent", start, end - start, attrs,
            scope=AGENT_SCOPE, events=[("agent_start_event", start + rng.randint(5, 60), agent_event)],
        )
        return end, [_Message("assistant", text)]

    def event(
        self, context: dict[str, str], parent_id: str, start: int, name: str, attributes: dict[str, str]
    ) -> int:
        """The tiny spans the ioa_observe SDK opens around an agent's start and end."""
        rng = self.rng
        duration = rng.randint(15, 150)
        return self.emit(
            self.new_span_id(), parent_id, name, start, duration, context,
            scope=EVENT_SCOPE, events=[(name, start + rng.randint(1, duration - 1), attributes)],
        )

    # -- LLM calls

    def llm(self, request: _LLMRequest, parent_id: str, start: int) -> int:
        """An LLM call, retried after a failed attempt (as the provider clients do)."""
        rng = self.rng
        agent = request.agent
        model = self.models[agent.name]
        t = start
        for attempt in range(3):
            failure = rng.choice(LLM_ERRORS[model.provider]) if attempt < 2 and rng.random() < LLM_FAILURE_RATE else None
            wrapper = self.wrappers[agent.name]
            if wrapper is None:
                t = self.llm_attempt(request, model, parent_id, t, failure)
            else:
                task_id = self.new_span_id()
                inner_end = self.llm_attempt(request, model, task_id, t + rng.randint(30, 400), failure)
                end = inner_end + rng.randint(20, 300)
                task_attrs = {**request.context, "traceloop.span.kind": "task", "traceloop.entity.name": wrapper, "traceloop.workflow.name": "LangGraph"}
                t = self.emit(task_id, parent_id, f"{wrapper}.task", t, end - t, task_attrs)
            if failure is None:
                return t
            t += rng.randint(200_000, 1_500_000)  # back-off before the retry
        raise AssertionError("the last attempt never fails")

    def llm_attempt(
        self,
        request: _LLMRequest,
        model: Model,
        parent_id: str,
        start: int,
        failure: tuple[str, str, tuple[int, int]] | None,
    ) -> int:
        rng = self.rng
        tools, prompt, text, calls = request.tools, request.prompt, request.text, request.calls
        span_id = self.new_span_id()
        name = f"{model.client}.chat"
        attrs = {
            **request.context,
            "llm.request.type": "chat",
            "gen_ai.system": model.system,
            "gen_ai.request.model": model.request,
            "gen_ai.request.temperature": self.temperatures[request.agent.name],
            "ioa_observe.association.properties.ls_provider": model.provider,
            "ioa_observe.association.properties.ls_model_name": model.request,
            "ioa_observe.association.properties.ls_model_type": "chat",
            "traceloop.workflow.name": "LangGraph",
            **_function_attrs(tools),
        }
        for i, message in enumerate(prompt):
            attrs[f"gen_ai.prompt.{i}.role"] = message.role
            attrs[f"gen_ai.prompt.{i}.content"] = message.content
            if message.tool_call_id:
                attrs[f"gen_ai.prompt.{i}.tool_call_id"] = message.tool_call_id
        if failure is not None:
            error_type, error_message, (low, high) = failure
            stack = (
                '  File "/usr/local/lib/python3.12/site-packages/langchain_core/language_models/chat_models.py", line 690, in generate\n'
                "    self._generate_with_cache(\n"
                f'  File "/usr/local/lib/python3.12/site-packages/{model.provider}/_base_client.py", line 1047, in request\n'
                "    raise self._make_status_error_from_response(err.response) from None\n"
            )
            message = _fill(error_message, model=model.request)
            duration = rng.randint(low, high)
            failed = self.raised(start, start + duration, error_type, message, stack)
            return self.emit(span_id, parent_id, name, start, duration, attrs, kind="Client", **failed)

        self.llm_calls += 1
        # Prompts grow along the session: the message history is sent every time.
        prompt_tokens = sum(len(m.content) // 4 for m in prompt) + 90 * len(tools) + rng.randint(120, 700) + 180 * self.llm_calls
        completion_tokens = (rng.randint(5, 40) + 18 * len(calls)) if calls else len(text) // 4 + rng.randint(10, 300)
        cache_read = 0
        if prompt_tokens >= 1024 and rng.random() < 0.3:  # prompt caching works in 128-token steps
            cache_read = 1024 + 128 * rng.randint(0, (prompt_tokens - 1024) // 128)
        anthropic = model.provider == "anthropic"
        attrs.update(
            {
                "gen_ai.response.model": model.response,
                "gen_ai.response.id": f"msg_01{_token(rng, 22)}" if anthropic else f"chatcmpl-{_token(rng, 29)}",
                "gen_ai.usage.prompt_tokens": str(prompt_tokens),
                "gen_ai.usage.completion_tokens": str(completion_tokens),
                "gen_ai.usage.cache_read_input_tokens": str(cache_read),
                "llm.usage.total_tokens": str(prompt_tokens + completion_tokens),
                "gen_ai.completion.0.role": "assistant",
                "gen_ai.completion.0.content": text,
            }
        )
        if calls:
            attrs["gen_ai.completion.0.finish_reason"] = "tool_use" if anthropic else "tool_calls"
            for j, call in enumerate(calls):
                attrs[f"gen_ai.completion.0.tool_calls.{j}.id"] = call.call_id
                attrs[f"gen_ai.completion.0.tool_calls.{j}.name"] = call.tool.name
                attrs[f"gen_ai.completion.0.tool_calls.{j}.arguments"] = json.dumps(call.args)
        else:
            attrs["gen_ai.completion.0.finish_reason"] = "end_turn" if anthropic else "stop"
        # Latency follows the generated tokens, within 0.3-4 s.
        duration = min(4_000_000, 300_000 + completion_tokens * rng.randint(3_000, 9_000) + rng.randint(0, 500_000))
        return self.emit(span_id, parent_id, name, start, duration, attrs, kind="Client")

    # -- tool calls

    def plan_tool_call(self, tool: Tool, agent: Agent) -> _ToolCall:
        rng = self.rng
        args = {arg: _fill(rng.choice(values), topic=self.topic) for arg, values in tool.args.items()}
        anthropic = self.models[agent.name].provider == "anthropic"
        call_id = f"toolu_01{_token(rng, 22)}" if anthropic else f"call_{_token(rng, 24)}"
        return _ToolCall(tool, args, call_id)

    def tool(
        self, context: dict[str, str], parent_id: str, start: int, call: _ToolCall
    ) -> tuple[int, _Message]:
        """A tool call; returns its end and the message the agent's next LLM call reads."""
        rng = self.rng
        tool = call.tool
        span_id = self.new_span_id()
        error = rng.choice(tool.errors) if rng.random() < TOOL_FAILURE_RATE else None
        values = {"topic": self.topic, **call.args}
        if tool.url:
            http_start = start + rng.randint(300, 3000)
            http_end = self.http(context, span_id, http_start, tool.url, error)
            duration = http_end + rng.randint(200, 1500) - start
        else:
            duration = _log_uniform(rng, 50_000, 3_000_000)
        attrs = {
            **context,
            "traceloop.span.kind": "tool",
            "traceloop.entity.name": tool.name,
            "traceloop.workflow.name": "LangGraph",
            "traceloop.entity.input": json.dumps({"input_str": str(call.args), "inputs": call.args, "tool_call_id": call.call_id}),
        }
        if error is None:
            output = _fill(rng.choice(tool.outputs), **values)
            attrs["traceloop.entity.output"] = json.dumps(
                {"output": {"content": output, "type": "tool", "name": tool.name, "tool_call_id": call.call_id, "status": "success"}}
            )
            end = self.emit(span_id, parent_id, f"{tool.name}.tool", start, duration, attrs)
            return end, _Message("tool", output, call.call_id)
        message = _fill(error.message, **values)
        stack = (
            '  File "/usr/local/lib/python3.12/site-packages/langchain_core/tools/base.py", line 884, in run\n'
            "    response = context.run(self._run, *tool_args, **tool_kwargs)\n"
            f'  File "/app/{self.app.name.replace("-", "_")}/tools.py", line {rng.randint(20, 240)}, in {tool.name}\n'
            f"    return _call_{tool.name}(**kwargs)\n"
        )
        failed = self.raised(start, start + duration, error.type, message, stack)
        end = self.emit(span_id, parent_id, f"{tool.name}.tool", start, duration, attrs, **failed)
        # LangGraph's ToolNode hands the error back to the model as the tool's answer.
        return end, _Message("tool", f"Error: {error.type}('{message}')\n Please fix your mistakes.", call.call_id)

    def http(
        self, context: dict[str, str], parent_id: str, start: int, url: str, error: ToolError | None
    ) -> int:
        """The HTTP request a tool makes: a span that is not a call."""
        rng = self.rng
        span_id = self.new_span_id()
        # The tool adds 0.5-4.5 ms around it, so tool calls stay within 0.05-3 s.
        duration = rng.randint(49_500, 2_995_000)
        attrs = {**context, "http.method": "POST", "http.url": url}
        status = 200 if error is None else error.http_status
        if status is None:  # no answer: requests raised, and the span recorded it
            stack = '  File "/usr/local/lib/python3.12/site-packages/requests/adapters.py", line 713, in send\n    raise ReadTimeout(e, request=request)\n'
            failed = self.raised(start, start + duration, error.type, error.message, stack)
            return self.emit(span_id, parent_id, "POST", start, duration, attrs, kind="Client", scope=HTTP_SCOPE, **failed)
        attrs["http.status_code"] = str(status)
        status_code = "Error" if status >= 400 else "Unset"
        return self.emit(
            span_id, parent_id, "POST", start, duration, attrs, kind="Client", scope=HTTP_SCOPE, status=status_code
        )
