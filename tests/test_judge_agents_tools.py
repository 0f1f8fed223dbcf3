"""The native judged metrics over agents and tools (issue 11): TaskDelegationAccuracy
per agent call and ToolUtilizationAccuracy per tool call, through the real judge
client against the local server, and their session average; an entity missing its
input fails with the reason and costs no call."""

from __future__ import annotations

import pytest

from builders import SessionBuilder
from mce_dagster.catalog import load_catalog
from mce_dagster.core.evaluate import evaluate_metric
from mce_dagster.core.ontology import Label
from mce_dagster.core.text import CallText
from mce_dagster.judge import collect_tasks, run_judge
from mce_dagster.settings import JudgeSettings
from openai_server import Completion, FakeOpenAI
from test_providers import PRICES



def session():
    """Two agents, one of which returned nothing; two tool calls, one without output."""
    b = SessionBuilder("agents-and-tools")
    mas = b.add(Label.MAS_CALL, "workflow", 0, 10)
    writer = b.add(Label.AGENT_CALL, "writer", 1, 5, parent=mas)
    critic = b.add(Label.AGENT_CALL, "critic", 5, 9, parent=mas)
    search = b.add(Label.TOOL_CALL, "search", 2, 3, parent=writer, success=True)
    fetch = b.add(Label.TOOL_CALL, "fetch", 3, 4, parent=writer, success=True)
    ctx = b.build()
    ctx.text = {
        writer: CallText(input="Write 200 words on ferns.", output="Ferns like shade..."),
        critic: CallText(input="Review the post."),
        search: CallText(input='{"q": "ferns shade"}', output="Ferns grow in low light."),
        fetch: CallText(input='{"url": "https://example.org"}'),
    }
    return ctx, {"writer": writer, "critic": critic, "search": search, "fetch": fetch}


@pytest.fixture(scope="module")
def server():
    # Every judgment: "Score: 4" with all its probability on 4, so (4 - 1) / 4.
    with FakeOpenAI(lambda req: Completion("Done as asked.\nScore: 4", {"4": 1.0}, 300, 10)) as srv:
        yield srv


def judge(metric, ctx, server):
    contexts = {ctx.session_id: ctx}
    tasks = collect_tasks(metric, contexts)
    settings = JudgeSettings(model="gpt-4o-mini", base_url=server.base_url, timeout=5, retries=1, concurrency=2)
    judgments, stats = run_judge(tasks, settings, PRICES)
    return tasks, stats, evaluate_metric(metric, contexts, {}, PRICES, judgments=judgments)


def test_delegation_and_tool_use_are_judged_and_missing_inputs_fail_with_no_call(server):
    catalog = load_catalog()
    ctx, ids = session()
    price = 300 * 1.5e-7 + 10 * 6e-7
    cases = [
        ("AgentCall/TaskDelegationAccuracy", "writer", "critic", "records no output"),
        ("ToolCall/ToolUtilizationAccuracy", "search", "fetch", "has no output"),
    ]
    for name, judged, missing, reason in cases:
        server.requests.clear()
        metric = catalog.resolve(name)[0]
        tasks, stats, batch = judge(metric, ctx, server)
        assert [t.entity_id for t in tasks] == [ids[judged]], name  # no call for the entity missing its input
        assert len(server.requests) == 1 and stats.calls == 1
        value = batch.values[ctx.session_id][ids[judged]]
        assert value.value == pytest.approx(0.75) and value.evaluation_cost == pytest.approx(price)
        assert value.evaluation_prompt_tokens == 300 and value.evaluation_model == "gpt-4o-mini"
        assert [(f.entity_id, reason in f.reason, f.reason.startswith("missing input")) for f in batch.failures] == [(ids[missing], True, True)], batch.failures


def test_the_session_average_of_tool_use_carries_the_cost_of_its_judgments(server):
    catalog = load_catalog()
    ctx, ids = session()
    per_tool = catalog.resolve("ToolCall/ToolUtilizationAccuracy")[0]
    _, _, tools = judge(per_tool, ctx, server)
    average = catalog.resolve("Session/AvgToolUtilizationAccuracy")[0]
    batch = evaluate_metric(average, {ctx.session_id: ctx}, {per_tool.key: tools.values}, PRICES)
    (value,) = batch.values[ctx.session_id].values()
    judged = list(tools.values[ctx.session_id].values())
    assert value.value == pytest.approx(0.75)
    assert judged and value.evaluation_cost == pytest.approx(sum(v.evaluation_cost for v in judged))
    assert value.evaluation_cost > 0


def test_judge_calls_take_a_slot_of_the_judge_pool(mce_home):
    import dagster as dg

    from mce_dagster.definitions import build_definitions, runtime

    pools = {
        key.to_user_string(): a.op.pool
        for a in build_definitions(*runtime()).assets
        if isinstance(a, dg.AssetsDefinition)
        for key in a.keys
    }
    for judged in ("Session/AnswerRelevancy", "ToolCall/ToolUtilizationAccuracy", "Session/deepeval_AnswerRelevancy"):
        assert pools[judged] == "judge", judged
    for unjudged in ("Session/Duration", "Session/AvgToolUtilizationAccuracy", "session_context"):
        assert pools[unjudged] is None, unjudged
