"""Benchmark: the same quality measured natively and through the provider libraries,
on the same sessions: `AnswerRelevancy` native (one rubric prompt, log-probabilities),
DeepEval's `AnswerRelevancyMetric` and Ragas's `AnswerRelevancy` (questions generated
from the answer, compared with the request by embeddings), through Dagster runs and
LiteLLM against the local OpenAI-compatible server (tests/openai_server.py). Reports
judge calls, tokens and cost per session for each, side by side.

    .venv/bin/python bench/providers.py [--sessions 20] [--seed 1] [--latency 0.05]
    .venv/bin/python bench/providers.py --real-traces

The server answers each library's structured requests from the schema the request
carries and counts tokens with LiteLLM's tokenizer for the model (prompt: the
messages sent; completion: the reply), so tokens and cost are those of the prompts
each implementation builds; what the replies say is scripted, so the values compare
the code paths, not the judges. Judge seconds include importing the library in the
run's process. Cost is from the project's price table. Prints a table and writes
bench/results/providers.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the local OpenAI-compatible server
sys.path.insert(0, str(REPO / "bench"))

from judge import REAL_FILES, REAL_TRACES, asset_metadata  # noqa: E402
from openai_server import Completion, FakeOpenAI, structured  # noqa: E402

METRICS = ("Session/AnswerRelevancy", "Session/deepeval_AnswerRelevancy", "Session/ragas_AnswerRelevancy")
LABELS = {
    "Session/AnswerRelevancy": "native",
    "Session/deepeval_AnswerRelevancy": "DeepEval",
    "Session/ragas_AnswerRelevancy": "Ragas",
}


def responder(model: str):
    """Structured requests get an instance of their schema, rubric prompts a short
    reasoning and a score; tokens are counted as the model would count them."""
    from mce_dagster.settings import prepare_litellm_environment

    prepare_litellm_environment()
    import litellm

    litellm.token_counter(model=model, text="warm")

    def respond(req: Mapping[str, Any]) -> Completion:
        prompt_tokens = litellm.token_counter(model=model, messages=req["messages"])
        # A committal answer (Ragas's flag; the schema's first value would be 1, "evasive").
        reply = structured(req, {"noncommittal": 0})
        if reply is not None:
            text = reply.text or (reply.tool_call[1] if reply.tool_call else "")
            reply.prompt_tokens = prompt_tokens
            reply.completion_tokens = litellm.token_counter(model=model, text=text)
            return reply
        prompt = "\n".join(str(m["content"]) for m in req["messages"])
        score = 1 + zlib.crc32(prompt.encode()) % 5
        text = f"The answer addresses most of the request.\nScore: {score}"
        return Completion(text, {str(score): 0.8, str(score % 5 + 1): 0.2}, prompt_tokens, litellm.token_counter(model=model, text=text))

    return respond


def values(ids: Sequence[str]) -> dict[str, list[float]]:
    """Asset -> every stored value of the three metrics."""
    from mce_dagster.graph import open_graph

    out: dict[str, list[float]] = {}
    for row in open_graph().read_results(list(ids)):
        provider = row.get("provider") or "native"
        name = row["name"] if provider == "native" else f"{provider}_{row['name']}"
        key = f"{row['scope']}/{name}"
        if key in METRICS:
            out.setdefault(key, []).append(float(row["result"]))
    return out


def rows(sessions: int, metadata: Mapping[str, Mapping[str, Any]], stored: Mapping[str, list[float]]) -> list[dict[str, Any]]:
    out = []
    for name in METRICS:
        m = metadata.get(name, {})
        found = stored.get(name, [])
        out.append({
            "metric": name,
            "implementation": LABELS[name],
            "evaluated": m.get("evaluated", 0),
            "failed": m.get("failed", 0),
            "calls_per_session": m.get("judge calls", 0) / sessions,
            "prompt_tokens_per_session": m.get("judge prompt tokens", 0) / sessions,
            "completion_tokens_per_session": m.get("judge completion tokens", 0) / sessions,
            "cost_per_session": m.get("judge cost (USD)", 0.0) / sessions,
            "judge_s": m.get("judge seconds", 0.0),
            "mean_value": sum(found) / len(found) if found else None,
            "retries": m.get("judge retries", 0),
        })
    return out


def table(report: Mapping[str, Any]) -> str:
    lines = [
        f"{report['sessions']} {report['source']} sessions, judge {report['model']} "
        f"(embeddings {report['embedding_model']}) on the local server, {report['latency_s']} s per reply",
        "",
        "| AnswerRelevancy | evaluated | failed | calls/session | prompt tokens/session | completion tokens/session | USD/session | judge s | mean value |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["metrics"]:
        lines.append(
            f"| {r['implementation']} (`{r['metric']}`) | {r['evaluated']} | {r['failed']} | {r['calls_per_session']:.2f} | "
            f"{r['prompt_tokens_per_session']:,.0f} | {r['completion_tokens_per_session']:,.0f} | {r['cost_per_session']:.6f} | "
            f"{r['judge_s']:.2f} | {'-' if r['mean_value'] is None else format(r['mean_value'], '.3f')} |"
        )
    native = report["metrics"][0]["cost_per_session"]
    if native:
        ratios = ", ".join(f"{r['implementation']} {r['cost_per_session'] / native:.1f}x" for r in report["metrics"][1:])
        lines += ["", f"cost per session against native: {ratios}; Dagster wall {report['wall_s']:.1f} s"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds the server takes per reply")
    parser.add_argument("--model", default="gpt-4o-mini")
    parser.add_argument("--real-traces", action="store_true", help="the four real traces instead of synthetic sessions")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="mce-bench-"))
    os.environ["MCE_HOME"] = str(work / "home")
    os.environ["DAGSTER_HOME"] = str(work / "dagster")
    os.environ.setdefault("MODEL_PRICES_REFRESH", "false")

    from mce_dagster import service
    from mce_dagster.graph import stop_embedded_server
    from mce_dagster.settings import Settings

    try:
        if args.real_traces:
            paths, source = [REAL_TRACES / f for f in REAL_FILES], "real"
        else:
            from mce_dagster.synthetic import write_export

            paths, source = [write_export(work / "sessions.json", args.sessions, args.seed).path], "synthetic"
        ids = service.ingest(paths).sessions
        with FakeOpenAI(responder(args.model), latency=args.latency) as server:
            os.environ.update({"LLM_MODEL_NAME": args.model, "OPENAI_API_KEY": "sk-local", "LLM_BASE_MODEL_URL_MCE": server.base_url})
            started = time.perf_counter()
            outcome = service.compute(list(ids), list(METRICS))
            wall = time.perf_counter() - started
            metadata = asset_metadata(outcome.runs)
            stored = values(ids)
            requests = len(server.requests)
    finally:
        stop_embedded_server()
        shutil.rmtree(work, ignore_errors=True)
    report: dict[str, Any] = {
        "source": source,
        "sessions": len(ids),
        "seed": None if args.real_traces else args.seed,
        "model": args.model,
        "embedding_model": Settings.from_env().judge.embedding_model,
        "latency_s": args.latency,
        "metrics": rows(len(ids), metadata, stored),
        "server_requests": requests,
        "wall_s": wall,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    counted = sum(r["calls_per_session"] * len(ids) for r in report["metrics"])
    # Every request the server answered was counted by some metric, and no more.
    report["all_requests_counted"] = round(counted) == requests
    try:
        report["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    results = REPO / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "providers.json").write_text(json.dumps(report, indent=2))
    print(table(report))
    print(f"server requests {requests}, counted by the metrics: {'all' if report['all_requests_counted'] else 'NOT ALL'}")


if __name__ == "__main__":
    main()
