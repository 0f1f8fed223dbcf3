"""Judged metrics end to end (issue 11, "done when"): `mce compute --metrics
AnswerRelevancy` against the local OpenAI-compatible server, then `mce kg metric
get --recursive --json`; with no model, judged metrics skipped with one line, or
failing with that reason when asked for by name; the budget."""

from __future__ import annotations

import json

import pytest

from mce_dagster.prices import load_price_table
from openai_server import LOGPROBS_UNSUPPORTED, Completion, FakeOpenAI
from test_cli import mce

FILES = ["llm_single_session.json", "multi_agent_supervisor.json"]
RANDOM = "Could you generate a random number between 2 and 3?"
PRESIDENT = "who was the 31st president of the united states?"


def user_text(req):
    return "\n".join(m["content"] for m in req["messages"] if m["role"] == "user")


def responder(req):
    text = user_text(req)
    if "Quality to grade: AnswerRelevancy" in text and RANDOM in text and "<<<BEGIN request>>>\n" + RANDOM in text:
        if "approximately 2.995" in text:  # the session's final answer
            return Completion("It answers.\nScore: 4", {"4": 0.5, "5": 0.25, "3": 0.25}, 321, 17)
        return Completion("fine\nScore: 5", {"5": 1.0}, 50, 5)
    if PRESIDENT in text:
        return Completion("The 31st president, Herbert Hoover. I'd say 4 out of 5", None, 200, 12)
    return Completion("ok\nScore: 3", {"3": 1.0}, 10, 2)


@pytest.fixture(scope="module")
def server():
    with FakeOpenAI(responder) as srv:
        yield srv


@pytest.fixture(scope="module")
def ingested(mce_home, real_traces):
    mce(mce_home, "ingest", *(str(real_traces / f) for f in FILES))
    return mce_home


def judge_env(server, model="gpt-4o-mini", **extra):
    return {
        "LLM_MODEL_NAME": model,
        "OPENAI_API_KEY": "sk-local-test",
        "LLM_BASE_MODEL_URL_MCE": server.base_url,
        "MODEL_PRICES_REFRESH": "false",
        "MCE_JUDGE_SAMPLES": "1",
        **extra,
    }


def results(home, session):
    return json.loads(mce(home, "kg", "metric", "get", session, "--recursive", "--json").stdout)


def session_of(real_traces, name):
    data = json.loads((real_traces / name).read_text())
    rows = data if isinstance(data, list) else [r for rs in data.values() for r in rs]
    return {r["SpanAttributes"].get("session.id") or r["SpanAttributes"].get("execution.id") for r in rows}.pop()


def test_no_model_skips_judged_metrics_with_one_line_and_fails_them_by_name(ingested, real_traces):
    env = {"LLM_MODEL_NAME": "", "MODEL_PRICES_REFRESH": "false"}
    done = mce(ingested, "compute", "--all", env=env)
    skipped = [line for line in done.stderr.splitlines() if "judged metrics skipped" in line]
    assert len(skipped) == 1 and "LLM_MODEL_NAME" in skipped[0]
    sid = session_of(real_traces, FILES[0])
    names = {r["metric"] for r in results(ingested, sid)}
    assert "Duration" in names and "AnswerRelevancy" not in names
    asked = mce(ingested, "compute", "--all", "--metrics", "Session/AnswerRelevancy", env=env, check=False)
    assert asked.returncode == 1 and "Session/AnswerRelevancy" in asked.stderr, asked.stderr


def test_answer_relevancy_through_the_cli(ingested, real_traces, server):
    sid_random, sid_president = (session_of(real_traces, f) for f in FILES)
    done = mce(ingested, "compute", "--all", "--metrics", "AnswerRelevancy", env=judge_env(server), check=False)
    # The president session's reply has no `Score:` line: it fails, named, exit 1.
    assert done.returncode == 1 and "Session/AnswerRelevancy" in done.stderr, done.stderr
    rows = [r for r in results(ingested, sid_random) if r["metric"] == "AnswerRelevancy" and r["scope"] == "Session"]
    assert len(rows) == 1
    r = rows[0]
    assert r["value"] == pytest.approx(((0.5 * 4 + 0.25 * 5 + 0.25 * 3) - 1) / 4)
    assert r["method"] == "logprobs" and r["evaluation_model"] == "gpt-4o-mini"
    assert (r["evaluation_prompt_tokens"], r["evaluation_completion_tokens"], r["evaluation_total_tokens"]) == (321, 17, 338)
    price = load_price_table().price("gpt-4o-mini")
    assert r["evaluation_cost"] == pytest.approx(321 * price.input_per_token + 17 * price.output_per_token)
    assert not [r for r in results(ingested, sid_president) if r["metric"] == "AnswerRelevancy" and r["scope"] == "Session"]
    # Deterministic results carry the defaults.
    duration = next(r for r in results(ingested, sid_random) if r["metric"] == "Duration")
    assert duration["evaluation_cost"] == 0 and duration["evaluation_model"] is None


def test_a_model_that_refuses_logprobs_still_gets_a_value(ingested, real_traces, server):
    sid = session_of(real_traces, FILES[0])
    server.script(then=lambda req: LOGPROBS_UNSUPPORTED if req.get("logprobs") else responder(req))
    try:
        mce(ingested, "compute", sid, "--metrics", "Session/AnswerRelevancy", env=judge_env(server, model="o3-mini"))
    finally:
        server.responder = responder
    r = next(r for r in results(ingested, sid) if r["metric"] == "AnswerRelevancy" and r["scope"] == "Session")
    assert r["method"] == "single" and r["value"] == 0.75 and r["evaluation_model"] == "o3-mini"


def test_past_the_budget_entities_fail_with_that_reason(ingested, real_traces, server):
    sid = session_of(real_traces, FILES[0])
    done = mce(ingested, "compute", sid, "--metrics", "LLMCall/AnswerRelevancy", "--budget", "0", env=judge_env(server), check=False)
    assert done.returncode == 1 and "LLMCall/AnswerRelevancy" in done.stderr
