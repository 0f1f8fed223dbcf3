"""Provider metrics through the CLI (issue 15, "done when"): `mce compute --all
--metrics deepeval.…,ragas.…,opik.… --json` over synthetic sessions against the local
OpenAI-compatible server gives the libraries' values, with every call, token and cent
counted, in the same `--json` outcome as native metrics, and results in the graph
read back like native ones by `mce kg metric get --json`."""

from __future__ import annotations

import json
import math

import pytest

from mce_dagster.graph import open_graph
from mce_dagster.prices import load_price_table
from openai_server import Completion, FakeOpenAI, structured
from test_cli import mce
from test_judge_cli import judge_env

SESSIONS = 3
# Every provider metric but Opik's Sentiment, which needs NLTK's lexicon download, and
# DeepEval's RoleAdherence, not applicable to synthetic sessions (no system prompt;
# tests/test_providers.py runs it on the real traces).
JUDGED = [
    "deepeval.AnswerRelevancy",
    "deepeval.AnswerCorrectness",
    "deepeval.Bias",
    "deepeval.Coherence",
    "deepeval.ConversationCompleteness",
    "deepeval.TaskCompletion",
    "deepeval.Tonality",
    "deepeval.Toxicity",
    "ragas.AgentGoalAccuracy",
    "ragas.AnswerRelevancy",
    "ragas.Faithfulness",
    "ragas.TopicAdherence",
    "opik.Hallucination",
]
# Compared by the library itself, with no model.
UNJUDGED = ["ragas.ToolCallAccuracy", "deepeval.ToolCorrectness"]


def reply(req: dict) -> Completion:
    """Structured requests get an instance of their schema; G-Eval's plain request,
    which shows the JSON it wants, gets a score of 7 out of 10."""
    return structured(req, {} if req.get("response_format") else {"score": 7}) or Completion("Fine.\nScore: 4", {"4": 1.0})


def spend_of(server: FakeOpenAI, requests: list[dict]) -> tuple[int, int, float]:
    """Prompt and completion tokens the server reported over these requests, and
    their price: chat at the judge model's, embeddings at the embedding model's."""
    prices = load_price_table()
    prompt = completion = 0
    cost = 0.0
    for req in requests:
        price = prices.price(req["model"])
        if "input" in req:  # an embeddings request
            tokens = server.embeddings(req)["usage"]["prompt_tokens"]
            prompt, cost = prompt + tokens, cost + tokens * price.input_per_token
            continue
        answer = reply(req)
        prompt += answer.prompt_tokens
        completion += answer.completion_tokens
        cost += answer.prompt_tokens * price.input_per_token + answer.completion_tokens * price.output_per_token
    return prompt, completion, cost


@pytest.fixture(scope="module")
def evaluated(mce_home):
    export = mce_home / "synthetic.json"
    mce(mce_home, "synth", str(export), "--sessions", str(SESSIONS), "--seed", "5")
    mce(mce_home, "ingest", str(export))
    with FakeOpenAI(reply) as server:
        done = mce(mce_home, "compute", "--all", "--metrics", ",".join(JUDGED + UNJUDGED), "--json", env=judge_env(server), check=False)
        prompt, completion, cost = spend_of(server, server.requests)
        calls = len(server.requests)
        embeddings = sum("input" in req for req in server.requests)
    native = mce(mce_home, "compute", "--all", "--metrics", "Duration", "--json", env={"LLM_MODEL_NAME": ""})
    ids = [s["id"] for s in open_graph().select_sessions()]
    rows = [r for sid in ids for r in json.loads(mce(mce_home, "kg", "metric", "get", sid, "--recursive", "--json").stdout)]
    return {"done": done, "native": json.loads(native.stdout), "calls": calls, "embeddings": embeddings, "tokens": (prompt, completion), "cost": cost, "rows": rows, "ids": ids}


def test_the_outcome_counts_every_call_and_has_the_native_format(evaluated):
    done = evaluated["done"]
    assert done.returncode == 0, done.stderr[-3000:]
    # No library reports to its vendor (Opik's Sentry, Ragas's and DeepEval's telemetry).
    assert "Retrying" not in done.stderr and "sentry" not in done.stderr.lower(), done.stderr[-3000:]
    outcome = json.loads(done.stdout)
    assert outcome.keys() == evaluated["native"].keys()
    assert outcome["sessions"] == SESSIONS and not outcome["failed_entities"] and not outcome["failed_runs"]
    assert outcome["judge_calls"] == evaluated["calls"] > 0  # counted at the LiteLLM layer: nothing escapes
    assert evaluated["embeddings"] > 0  # ragas.AnswerRelevancy embeds, and that is counted too
    assert math.isclose(outcome["judge_cost_usd"], evaluated["cost"])


def test_each_metric_stores_the_librarys_value_with_its_calls_tokens_and_cost(evaluated):
    rows = evaluated["rows"]
    by_metric: dict[str, list[dict]] = {}
    for row in rows:
        by_metric.setdefault(f"{row['provider']}.{row['metric']}", []).append(row)
    for name in JUDGED:
        got = by_metric.get(name, [])
        assert {r["session_id"] for r in got} == set(evaluated["ids"]), name
        for r in got:
            assert r["scope"] == "Session" and 0.0 <= r["value"] <= 1.0, (name, r["value"])
            assert r["evaluation_model"] == "gpt-4o-mini" and r["evaluation_cost"] > 0, name
            assert r["evaluation_total_tokens"] == r["evaluation_prompt_tokens"] + r["evaluation_completion_tokens"] > 0
            metadata = json.loads(r["metadata"]) if isinstance(r["metadata"], str) else r["metadata"]
            assert metadata["judge_calls"] >= 1, name
    # G-Eval scores out of 10; the judge said 7.
    assert all(r["value"] == pytest.approx(0.7) for r in by_metric["deepeval.Coherence"])
    # The stored spend is the whole spend: tokens and cost add up to the server's.
    judged = [r for name in JUDGED for r in by_metric[name]]
    assert (sum(r["evaluation_prompt_tokens"] for r in judged), sum(r["evaluation_completion_tokens"] for r in judged)) == evaluated["tokens"]
    assert math.isclose(sum(r["evaluation_cost"] for r in judged), json.loads(evaluated["done"].stdout)["judge_cost_usd"])
    for name in UNJUDGED:
        for r in by_metric.get(name, []):
            assert r["evaluation_cost"] == 0 and r["evaluation_model"] is None, name
    assert by_metric.get("ragas.ToolCallAccuracy"), "ToolCallAccuracy compares the synthetic sessions' tool calls"
