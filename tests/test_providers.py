"""Provider metrics (issue 15): DeepEval, Ragas and Opik through the entry-point
group, each library's real metric classes fed cases built from the real traces, and
every call they make going through the project's judge rules (cache, retries,
budget, time-out, counting) against the local OpenAI-compatible server, which
answers their structured requests from the schema each one carries."""

from __future__ import annotations

import ast
import dataclasses
import json
import math

import pytest

from mce_dagster.catalog import load_catalog
from mce_dagster.catalog.plugins import Plugin
from mce_dagster.core.evaluate import evaluate_metric
from mce_dagster.core.metric import MetricFailure
from mce_dagster.core.ontology import Label, Scope
from mce_dagster.core.pricing import PriceTable
from mce_dagster.ingest import ingest_paths
from mce_dagster.judge import Budget
from mce_dagster.providers import (
    Library,
    LibraryMetric,
    LibraryOutcome,
    ProviderOptions,
    outcome_value,
    provider_statuses,
)
from mce_dagster.providers import cases as session_cases
from mce_dagster.providers.gateway import Gateway
from mce_dagster.settings import JudgeSettings
from openai_server import SERVER_ERROR, Completion, FakeOpenAI
from test_judge_text import FILES, expected_answer, rows_of

PRICES = PriceTable(
    {
        "gpt-4o": {"input_cost_per_token": 2.5e-6, "output_cost_per_token": 1e-5},
        "gpt-4o-mini": {"input_cost_per_token": 1.5e-7, "output_cost_per_token": 6e-7},
    }
)


# -- the catalog -----------------------------------------------------------------


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_each_provider_comes_from_its_entry_point_with_its_metrics(catalog):
    for provider, module in (("deepeval", "deepeval"), ("ragas", "ragas"), ("opik", "opik")):
        assert f"entry point {provider} = mce_dagster.providers.{module}:plugin" in catalog.providers[provider]
    statuses = {s.provider: s for s in provider_statuses(catalog)}
    assert statuses["deepeval"].library_version == "4.3.1" and statuses["deepeval"].available
    assert {"AnswerRelevancy", "RoleAdherence", "ConversationCompleteness", "ToolCorrectness"} <= set(statuses["deepeval"].metrics)
    assert {"ToolCallAccuracy", "AgentGoalAccuracy", "TopicAdherence", "Faithfulness"} <= set(statuses["ragas"].metrics)
    assert {"Hallucination", "Sentiment"} <= set(statuses["opik"].metrics)


def test_the_same_name_under_two_providers_is_two_assets(catalog):
    native = catalog.resolve("Session/AnswerRelevancy")[0]
    library = catalog.resolve("Session/deepeval.AnswerRelevancy")[0]
    assert (str(native.key), str(library.key)) == ("Session/AnswerRelevancy", "Session/deepeval_AnswerRelevancy")
    assert native.compute is not library.compute and isinstance(library.compute, LibraryMetric)


def test_the_code_locations_asset_graph_holds_provider_metrics_in_their_scope_group():
    import dagster as dg

    from mce_dagster.definitions import build_definitions, runtime

    graph = build_definitions(*runtime()).resolve_asset_graph()
    for provider, name in (("native", "AnswerRelevancy"), ("deepeval", "AnswerRelevancy"), ("ragas", "AnswerRelevancy"),
                           ("ragas", "ToolCallAccuracy"), ("opik", "Hallucination")):
        asset = name if provider == "native" else f"{provider}_{name}"
        node = graph.get(dg.AssetKey(["Session", asset]))
        assert node.group_name == "Session"
        assert set(node.parent_keys) == {dg.AssetKey(["session_context"])}


def test_a_provider_whose_library_is_missing_is_unavailable_and_its_metrics_fail_saying_how_to_install(tmp_path):
    absent = Library("deepeval", "mce_no_such_library", "mce-no-such-library")
    metric = LibraryMetric(absent, "AnswerRelevancy", lambda e, c, o: None, lambda case, gw: None)
    defs = tmp_path / "defs"
    defs.mkdir()
    (defs / "AnswerRelevancy.yaml").write_text(
        "name: AnswerRelevancy\nprovider: deepeval\nkind: llm_judge\nscopes: [Session]\nunit: score\n"
        "value_range: [0, 1]\nversion: 1\ndescription: x\n"
    )
    catalog = load_catalog(plugins=[Plugin("deepeval", defs, {"AnswerRelevancy": metric})])
    status = next(s for s in provider_statuses(catalog) if s.provider == "deepeval")
    assert not status.available and status.library_version is None
    assert "pip install 'mce-dagster[deepeval]'" in status.reason
    with pytest.raises(MetricFailure, match=r"not installed: pip install 'mce-dagster\[deepeval\]'"):
        metric(None, None)


# -- cases from the real traces --------------------------------------------------


@pytest.fixture(scope="module")
def traces(real_traces, kg):
    """session id -> (context with its text, the file's rows)."""
    report = ingest_paths([real_traces / f for f in FILES], kg)
    assert not report.problems and not report.file_errors
    contexts = kg.read_contexts(report.sessions)
    texts = kg.read_texts(report.sessions)
    rows_by_file = {f: rows_of(real_traces / f) for f in FILES}
    out = {}
    for sid, ctx in contexts.items():
        ctx.text = texts[sid]
        ids = {n.id for n in ctx.nodes.values()}
        rows = next(r for r in rows_by_file.values() if any(row["SpanId"] in ids for row in r))
        out[sid] = (ctx, rows)
    return out


def _tool_rows(rows):
    return sorted((r for r in rows if r["SpanName"].endswith(".tool")), key=lambda r: r["Timestamp"])


def _arguments_in_file(row) -> dict:
    """The tool call's arguments, read from the span as the test finds them."""
    attrs = row["SpanAttributes"]
    raw = json.loads(attrs.get("traceloop.entity.input") or attrs.get("ioa_observe.entity.input"))
    if "input_str" in raw:  # LangChain: the tool's input; its `kwargs` are the runner's
        return ast.literal_eval(raw["input_str"])
    return raw["kwargs"]


def _prompts(rows, role):
    chats = [r for r in rows if r["SpanName"].endswith(".chat")]
    return {
        r["SpanAttributes"][f"gen_ai.prompt.{i}.content"].strip()
        for r in chats
        for i in range(60)
        if r["SpanAttributes"].get(f"gen_ai.prompt.{i}.role") == role and r["SpanAttributes"].get(f"gen_ai.prompt.{i}.content")
    }


def test_tool_calls_are_every_tool_span_with_its_arguments_and_output(traces):
    seen = 0
    for ctx, rows in traces.values():
        uses = session_cases.tool_uses(ctx)
        spans = _tool_rows(rows)
        assert [u.name for u in uses] == [r["SpanName"].removesuffix(".tool") for r in spans]
        for use, row in zip(uses, spans):
            assert use.arguments == _arguments_in_file(row)
            assert use.output and use.output.strip()
            seen += 1
    assert seen == 15


def test_the_conversation_is_the_sessions_real_turns(traces):
    for ctx, rows in traces.values():
        conversation = session_cases.conversation(ctx)
        roles = [t.role for t in conversation.turns]
        assert roles.count("user") >= 1 and roles.count("assistant") >= 1
        user_prompts = _prompts(rows, "user")
        assert all(t.content in user_prompts or t.content == session_cases.exchange(ctx).input for t in conversation.turns if t.role == "user")
        assistant = [t.content for t in conversation.turns if t.role == "assistant"]
        assert expected_answer(rows) in assistant
        assert conversation.role in _prompts(rows, "system")
        attached = [u.name for t in conversation.turns for u in t.tools]
        assert attached == [r["SpanName"].removesuffix(".tool") for r in _tool_rows(rows)]


def test_multi_agent_sessions_are_multi_turn(traces):
    longest = max(len(session_cases.conversation(ctx).turns) for ctx, _ in traces.values())
    assert longest >= 4


def test_the_libraries_cases_carry_the_same_contents(traces):
    from mce_dagster.providers import prepare_library_environment

    prepare_library_environment()  # before DeepEval is imported: its folder under MCE_HOME
    from deepeval.test_case import ConversationalTestCase, LLMTestCase
    from ragas.messages import AIMessage, ToolMessage

    from mce_dagster.providers.deepeval import inputs
    from mce_dagster.providers.deepeval.library import conversational_case, llm_case
    from mce_dagster.providers.ragas.library import messages

    for ctx, rows in traces.values():
        single = llm_case(inputs.single_turn_with_tools(None, ctx, ProviderOptions()))
        assert isinstance(single, LLMTestCase)
        assert single.actual_output == expected_answer(rows)
        assert [t.name for t in single.tools_called or []] == [r["SpanName"].removesuffix(".tool") for r in _tool_rows(rows)]
        turns = session_cases.conversation(ctx).turns
        conversational = conversational_case(session_cases.conversation(ctx))
        assert isinstance(conversational, ConversationalTestCase)
        assert [(t.role, t.content) for t in conversational.turns] == [(t.role, t.content) for t in turns]
        ragas_messages = messages(session_cases.conversation(ctx))
        assert sum(isinstance(m, ToolMessage) for m in ragas_messages) == len(_tool_rows(rows))
        called = [c.name for m in ragas_messages if isinstance(m, AIMessage) for c in (m.tool_calls or [])]
        assert called == [r["SpanName"].removesuffix(".tool") for r in _tool_rows(rows)]


def test_expected_tools_come_from_config_else_the_sessions_definitions_else_not_applicable(traces):
    from mce_dagster.providers.deepeval import inputs

    for ctx, _ in traces.values():
        offered = session_cases.offered_tools(ctx)
        case = inputs.tool_correctness(None, ctx, ProviderOptions())
        if offered:
            assert case.expected_tools == offered
        else:
            assert "no expected tools" in case.reason
        configured = inputs.tool_correctness(None, ctx, ProviderOptions(expected_tools={"default": ("calculator",)}))
        assert configured.expected_tools == ("calculator",)


# -- the libraries' real code paths, against the local server --------------------


@pytest.fixture(scope="module")
def server():
    with FakeOpenAI() as srv:
        yield srv


@pytest.fixture(autouse=True)
def fresh(request):
    if "server" in request.fixturenames:
        srv = request.getfixturevalue("server")
        srv.requests.clear()
        srv.request_times.clear()
        srv.values = {}
        srv.responder = srv.default_reply
    yield


def settings(server, **kw) -> JudgeSettings:
    return dataclasses.replace(
        JudgeSettings(model="gpt-4o-mini", base_url=server.base_url, timeout=5, retries=1, concurrency=4), **kw
    )


def run(catalog, name, contexts, gateway, options=ProviderOptions()):
    metric = catalog.resolve(name)[0]
    bound = gateway.settings.concurrency if gateway is not None else 4
    outcomes = metric.compute.run_batch(metric.scope, contexts, gateway, options, bound)
    return evaluate_metric(metric, contexts, {}, PRICES, judgments=outcomes)


def _text_of(request) -> str:
    parts = []
    for message in request["messages"]:
        content = message["content"]
        parts.extend([p.get("text", "") for p in content] if isinstance(content, list) else [content or ""])
    return "\n".join(parts)


def usage(server):
    """Tokens the server reported over every request it answered."""
    prompt = completion = 0
    for req in server.requests:
        if "input" in req:  # an embeddings request
            prompt += server.embeddings(req)["usage"]["prompt_tokens"]
            continue
        reply = server.default_reply(req)
        prompt += reply.prompt_tokens
        completion += reply.completion_tokens
    return prompt, completion


@pytest.fixture(scope="module")
def contexts(traces):
    return {sid: ctx for sid, (ctx, _) in traces.items()}


def test_deepeval_answer_relevancy_runs_its_own_prompts_and_every_call_is_counted(catalog, server, contexts):
    gateway = Gateway(settings(server), PRICES)
    batch = run(catalog, "deepeval.AnswerRelevancy", contexts, gateway)
    assert not batch.failures and batch.evaluated == len(contexts)
    values = [v for by in batch.values.values() for v in by.values()]
    assert all(v.value == 1.0 for v in values)  # every verdict the server gave is "yes"
    assert len(server.requests) == 3 * len(contexts)  # statements, verdicts, reason
    assert all(r["response_format"]["type"] == "json_schema" for r in server.requests)
    prompt, completion = usage(server)
    assert sum(v.evaluation_prompt_tokens for v in values) == prompt
    assert sum(v.evaluation_completion_tokens for v in values) == completion
    assert math.isclose(sum(v.evaluation_cost for v in values), prompt * 1.5e-7 + completion * 6e-7)
    first = values[0]
    assert first.evaluation_model == "gpt-4o-mini" and first.metadata["judge_calls"] == 3
    assert first.metadata["threshold"] == 0.5 and first.metadata["success"] is True
    assert first.reasoning
    # What DeepEval judged is each session's final answer.
    sent = "\n".join(json.dumps(r["messages"]) for r in server.requests)
    for ctx in contexts.values():
        assert json.dumps(session_cases.exchange(ctx).output[:80])[1:-1] in sent


def test_the_librarys_score_follows_the_judges_replies(catalog, server, contexts):
    server.values = {"verdict": "no"}
    batch = run(catalog, "deepeval.AnswerRelevancy", contexts, Gateway(settings(server), PRICES))
    assert {v.value for by in batch.values.values() for v in by.values()} == {0.0}
    assert all(v.metadata["success"] is False for by in batch.values.values() for v in by.values())


def test_deepeval_conversational_metrics_get_the_multi_turn_case(catalog, server, contexts):
    batch = run(catalog, "deepeval.ConversationCompleteness", contexts, Gateway(settings(server), PRICES))
    assert not batch.failures and batch.evaluated == len(contexts)
    sent = "\n".join(_text_of(r) for r in server.requests)
    for ctx in contexts.values():
        users = [t for t in session_cases.conversation(ctx).turns if t.role == "user"]
        for turn in users:
            # DeepEval quotes each turn as a Python literal: compare one line's words
            assert turn.content.strip().splitlines()[0][:40] in sent.replace("\\n", "\n")


def test_deepeval_role_adherence_takes_the_system_prompt_as_the_role(catalog, server, contexts):
    with_role = {sid: ctx for sid, ctx in contexts.items() if session_cases.conversation(ctx).role}
    assert with_role, "a real trace records a system prompt"
    batch = run(catalog, "deepeval.RoleAdherence", contexts, Gateway(settings(server), PRICES))
    assert not batch.failures and batch.evaluated == len(with_role)
    assert batch.not_applicable == len(contexts) - len(with_role)
    assert all(0.0 <= v.value <= 1.0 for by in batch.values.values() for v in by.values())
    sent = "\n".join(_text_of(r) for r in server.requests).replace("\\n", "\n")
    for ctx in with_role.values():
        assert session_cases.conversation(ctx).role.strip().splitlines()[0][:40] in sent


def test_a_server_error_fails_the_entity_after_the_retries_and_nothing_is_written(catalog, server, contexts):
    server.responder = lambda req: SERVER_ERROR
    batch = run(catalog, "deepeval.AnswerRelevancy", contexts, Gateway(settings(server, retries=1), PRICES))
    assert batch.evaluated == 0 and len(batch.failures) == len(contexts)
    assert all("failed after 2 attempt(s)" in f.reason and "InternalServerError" in f.reason for f in batch.failures)
    assert len(server.requests) == 2 * len(contexts)


def test_a_reply_the_library_cannot_parse_fails_the_entity(catalog, server, contexts):
    server.responder = lambda req: Completion("I would rather not answer in JSON.")
    batch = run(catalog, "deepeval.AnswerRelevancy", contexts, Gateway(settings(server), PRICES))
    assert batch.evaluated == 0 and len(batch.failures) == len(contexts)
    assert all(f.reason.startswith("the library failed:") for f in batch.failures)


def test_a_reply_past_the_timeout_fails_the_entity(catalog, server, contexts):
    server.responder = lambda req: Completion("{}", delay=2.5)
    one = dict(list(contexts.items())[:1])
    batch = run(catalog, "deepeval.AnswerRelevancy", one, Gateway(settings(server, timeout=1, retries=0), PRICES))
    assert batch.evaluated == 0 and len(batch.failures) == 1
    assert "Timeout" in batch.failures[0].reason


def test_a_nan_or_missing_score_is_a_failure_never_a_value():
    for score in (float("nan"), None, float("inf")):
        with pytest.raises(MetricFailure, match="score"):
            outcome_value("deepeval.AnswerRelevancy", LibraryOutcome(model="m", score=score, calls=1))


def test_the_budget_stops_the_librarys_calls(catalog, server, contexts):
    gateway = Gateway(settings(server), PRICES, Budget(0.0))
    batch = run(catalog, "deepeval.AnswerRelevancy", contexts, gateway)
    assert batch.evaluated == 0 and server.requests == []
    assert all("budget" in f.reason for f in batch.failures)


def test_record_then_replay_gives_the_same_values_tokens_and_cost_with_no_call(catalog, server, contexts, tmp_path):
    cache = tmp_path / "judge.sqlite"
    recorded = run(catalog, "deepeval.AnswerRelevancy", contexts, Gateway(settings(server, cache="record", cache_path=cache), PRICES))
    made = len(server.requests)
    assert made == 3 * len(contexts)
    server.responder = lambda req: SERVER_ERROR  # a replay must not reach the server
    replayed = run(catalog, "deepeval.AnswerRelevancy", contexts, Gateway(settings(server, cache="replay", cache_path=cache), PRICES))
    assert len(server.requests) == made and not replayed.failures
    for sid, by in recorded.values.items():
        for eid, value in by.items():
            again = replayed.values[sid][eid]
            assert (again.value, again.evaluation_prompt_tokens, again.evaluation_cost) == (
                value.value, value.evaluation_prompt_tokens, value.evaluation_cost
            )
            assert again.metadata["cached_replies"] == 3


def test_ragas_tool_call_accuracy_compares_the_sessions_calls_without_a_model(catalog, traces, contexts):
    sid, (ctx, rows) = next((sid, t) for sid, t in traces.items() if len(_tool_rows(t[1])) == 1)
    call = _tool_rows(rows)[0]
    name, args = call["SpanName"].removesuffix(".tool"), _arguments_in_file(call)
    right = ProviderOptions(expected_tools={"default": (f"{name} {json.dumps(args)}",)})
    wrong = ProviderOptions(expected_tools={"default": (f"{name} {json.dumps({k: 'other' for k in args})}",)})
    assert run(catalog, "ragas.ToolCallAccuracy", {sid: ctx}, None, right).values[sid][sid].value == 1.0
    assert run(catalog, "ragas.ToolCallAccuracy", {sid: ctx}, None, wrong).values[sid][sid].value == 0.0


def test_ragas_topic_adherence_reads_its_topics_from_config(catalog, server, contexts):
    batch = run(catalog, "ragas.TopicAdherence", contexts, Gateway(settings(server), PRICES))
    assert batch.not_applicable == len(contexts) and server.requests == []
    options = ProviderOptions(topics={"default": ("US presidents", "fish species")})
    batch = run(catalog, "ragas.TopicAdherence", contexts, Gateway(settings(server), PRICES), options)
    assert batch.evaluated == len(contexts) and not batch.failures
    sent = "\n".join(json.dumps(r["messages"]) for r in server.requests)
    assert "US presidents" in sent and "fish species" in sent
    assert all(r["response_format"]["type"] == "json_object" for r in server.requests)
    values = [v for by in batch.values.values() for v in by.values()]
    assert sum(v.metadata["judge_calls"] for v in values) == len(server.requests)


def test_ragas_agent_goal_accuracy_and_opik_hallucination_run_through_the_judge(catalog, server, contexts):
    for name in ("ragas.AgentGoalAccuracy", "opik.Hallucination"):
        server.requests.clear()
        batch = run(catalog, name, contexts, Gateway(settings(server), PRICES))
        assert not batch.failures and batch.evaluated == len(contexts), batch.failures[:1]
        values = [v for by in batch.values.values() for v in by.values()]
        assert sum(v.metadata["judge_calls"] for v in values) == len(server.requests) > 0
        assert sum(v.evaluation_prompt_tokens for v in values) == usage(server)[0]


def test_faithfulness_needs_retrieval_context(catalog, server, traces):
    for sid, (ctx, rows) in traces.items():
        batch = run(catalog, "ragas.Faithfulness", {sid: ctx}, Gateway(settings(server), PRICES))
        if session_cases.retrieval_context(ctx):
            assert batch.evaluated == 1, batch.failures[:1]
        else:
            assert batch.not_applicable == 1


def test_calls_outside_an_evaluation_are_not_touched(server):
    import litellm

    gateway = Gateway(settings(server), PRICES)
    with gateway.installed():
        reply = litellm.completion(
            model="openai/gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], api_base=server.base_url, api_key="none"
        )
    assert reply.choices[0].message.content.endswith("Score: 4")
    assert gateway.stats.calls == 0 and litellm.completion.__module__ != "mce_dagster.providers.gateway"


def test_topics_and_expected_tools_are_read_from_mce_config(tmp_path, monkeypatch):
    from mce_dagster.catalog import load_catalog
    from mce_dagster.config import load_config
    from mce_dagster.defs.judging import provider_options
    from mce_dagster.settings import Settings

    path = tmp_path / "mce_config.yaml"
    path.write_text(
        "metrics:\n  Session: [Duration]\nproviders:\n  topics:\n    travel-planner: [flights, hotels]\n"
        "  expected_tools:\n    default: ['search {\"query\": \"x\"}']\n"
    )
    monkeypatch.setenv("MCE_CONFIG", str(path))
    # As the definitions read them: the file of MCE_CONFIG, its `providers:` section.
    options = provider_options(load_config(load_catalog(), Settings.from_env().config_path).providers)
    assert options.topics == {"travel-planner": ("flights", "hotels")}
    assert session_cases.expected_call(options.expected_tools["default"][0]) == ("search", {"query": "x"})


def test_ragas_answer_relevancy_embeds_through_the_judges_endpoint_and_counts_it(catalog, server, contexts):
    batch = run(catalog, "ragas.AnswerRelevancy", contexts, Gateway(settings(server), PRICES))
    assert not batch.failures and batch.evaluated == len(contexts), batch.failures[:1]
    embedded = [r for r in server.requests if "input" in r]
    assert embedded and all(r["model"] == "text-embedding-3-small" for r in embedded)
    values = [v for by in batch.values.values() for v in by.values()]
    assert all(0.0 <= v.value <= 1.0 for v in values)
    assert sum(v.metadata["judge_calls"] for v in values) == len(server.requests)
    assert sum(v.evaluation_prompt_tokens for v in values) == usage(server)[0]
    # Each session's request was embedded, as Ragas compares the generated questions with it.
    inputs = {t for r in embedded for t in ([r["input"]] if isinstance(r["input"], str) else r["input"])}
    assert all(session_cases.exchange(ctx).input in inputs for ctx in contexts.values())


def test_a_rate_limit_is_retried_after_the_time_the_server_asks_and_the_retry_is_counted(catalog, server, contexts):
    from openai_server import RATE_LIMITED

    server.script(RATE_LIMITED)
    one = dict(list(contexts.items())[:1])
    gateway = Gateway(settings(server, retries=2), PRICES)
    started = __import__("time").monotonic()
    batch = run(catalog, "deepeval.AnswerRelevancy", one, gateway)
    assert __import__("time").monotonic() - started >= 1.0  # Retry-After: 1
    [value] = [v for by in batch.values.values() for v in by.values()]
    assert gateway.stats.retries == 1 and value.metadata["judge_calls"] == 4 == len(server.requests)


@pytest.mark.parametrize("bound", [1, 3])
def test_the_libraries_calls_stay_within_the_concurrency_bound(catalog, server, contexts, bound):
    server.latency = 0.3
    try:
        run(catalog, "deepeval.AnswerRelevancy", contexts, Gateway(settings(server, concurrency=bound), PRICES))
    finally:
        server.latency = 0.0
    times = sorted(server.request_times)
    # Requests that arrive less than one reply's latency apart were in flight together.
    widest = max(sum(1 for u in times if t <= u < t + 0.25) for t in times)
    assert widest == min(bound, len(contexts))


def test_provider_list_imports_no_library():
    from test_layout import HEAVY, _cli, _loaded_by

    assert not _loaded_by(_cli("provider", "list", "--json")) & set(HEAVY)
