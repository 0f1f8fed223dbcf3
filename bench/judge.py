"""Benchmark: the native judged metrics over N sessions, through Dagster runs and
LiteLLM, against the local OpenAI-compatible server (tests/openai_server.py) with a
fixed latency per reply: judge calls, tokens and cost per evaluated session per
metric, and the speed-up of concurrent calls (MCE_JUDGE_CONCURRENCY) over
sequential ones, side by side in one run.

    .venv/bin/python bench/judge.py [--sessions 8] [--seed 1] [--latency 0.2] [--concurrency 8]
    .venv/bin/python bench/judge.py --real-traces      # the four traces of ../shared/data/real-traces

The server counts tokens with LiteLLM's tokenizer for the model (prompt: the
messages sent; completion: the reply), so tokens and cost are those of the
prompts the metrics build; replies are short and scripted. Cost is from the
project's price table. Prints a table and writes bench/results/judge.json.
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
REAL_TRACES = REPO.parent / "shared" / "data" / "real-traces"
REAL_FILES = ("multi_agent_supervisor.json", "api_noa_2.json", "gls_linear.json", "llm_single_session.json")
sys.path.insert(0, str(REPO / "tests"))  # the local OpenAI-compatible server

from openai_server import Completion, FakeOpenAI  # noqa: E402

# Judge metadata keys an asset's materialization carries (defs/judging.py).
CALLS, PROMPT, COMPLETION, COST, SECONDS = (
    "judge calls", "judge prompt tokens", "judge completion tokens", "judge cost (USD)", "judge seconds",
)
REASONS = (
    "The material meets the rubric in most respects, with minor gaps.",
    "Part of what the rubric asks for is missing from the material.",
    "The material follows the rubric closely.",
)


def responder(model: str):
    """A judge that answers every prompt with a short reasoning and a score, and
    counts tokens as the model would."""
    from mce_dagster.settings import prepare_litellm_environment

    prepare_litellm_environment()  # before LiteLLM is imported: no price map fetched
    import litellm

    litellm.token_counter(model=model, text="warm")  # loads the tokenizer outside any timed call

    def respond(req: Mapping[str, Any]) -> Completion:
        prompt = "\n".join(m["content"] for m in req["messages"])
        h = zlib.crc32(prompt.encode())
        score = 1 + h % 5
        text = f"{REASONS[h % len(REASONS)]}\nScore: {score}"
        probs = {str(score): 0.7, str(score % 5 + 1): 0.2, str((score + 1) % 5 + 1): 0.1}
        return Completion(
            text,
            probs,
            prompt_tokens=litellm.token_counter(model=model, messages=req["messages"]),
            completion_tokens=litellm.token_counter(model=model, text=text),
        )

    return respond


def judged_metrics() -> list[str]:
    from mce_dagster.definitions import runtime

    catalog, _ = runtime()
    return [str(m.key) for m in catalog.ordered() if m.definition.kind == "llm_judge"]


def asset_metadata(run_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Asset -> the metadata of its materialization (one per batch: the first)."""
    import dagster as dg

    from mce_dagster.runner import dagster_instance

    instance = dagster_instance()
    out: dict[str, dict[str, Any]] = {}
    for run_id in run_ids:
        for record in instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records:
            event = record.event_log_entry.dagster_event
            name = event.asset_key.to_user_string()
            if name in out:
                continue
            metadata = event.event_specific_data.materialization.metadata
            out[name] = {k: getattr(v, "value", v) for k, v in metadata.items()}
    return out


def snapshot(ids: Sequence[str]) -> dict[tuple[str, str, str], float]:
    """Every judged result stored: (metric, scope, entity) -> value."""
    from mce_dagster.graph import open_graph

    rows = open_graph().read_results(list(ids))
    return {(r["name"], r["scope"], r["entityId"]): r["result"] for r in rows if r.get("evaluationModel")}


def one_pass(ids: Sequence[str], metrics: Sequence[str], concurrency: int) -> dict[str, Any]:
    from mce_dagster import service

    os.environ["MCE_JUDGE_CONCURRENCY"] = str(concurrency)
    started = time.perf_counter()
    outcome = service.compute(list(ids), list(metrics))
    wall = time.perf_counter() - started
    return {"wall_s": wall, "metadata": asset_metadata(outcome.runs), "results": snapshot(ids), "runs": len(outcome.runs)}


def metric_rows(metrics: Sequence[str], sessions: int, passes: Mapping[int, Mapping[str, Any]], concurrency: int) -> list[dict[str, Any]]:
    """Per metric: what it cost per evaluated session, and its judge time per pass."""
    rows = []
    for name in metrics:
        seq = passes[1]["metadata"].get(name, {})
        conc = passes[concurrency]["metadata"].get(name, {})
        prompt, completion = seq.get(PROMPT, 0), seq.get(COMPLETION, 0)
        rows.append({
            "metric": name,
            "entities": seq.get("evaluated", 0) + seq.get("failed", 0),
            "evaluated": seq.get("evaluated", 0),
            "failed": seq.get("failed", 0),
            "not_applicable": seq.get("not_applicable", 0),
            "calls": seq.get(CALLS, 0),
            "calls_per_session": seq.get(CALLS, 0) / sessions,
            "prompt_tokens_per_session": prompt / sessions,
            "completion_tokens_per_session": completion / sessions,
            "tokens_per_session": (prompt + completion) / sessions,
            "cost_per_session": seq.get(COST, 0.0) / sessions,
            "judge_s_sequential": seq.get(SECONDS, 0.0),
            "judge_s_concurrent": conc.get(SECONDS, 0.0),
            "speedup": seq.get(SECONDS, 0.0) / conc[SECONDS] if conc.get(SECONDS) else None,
            # A retried call (timeout, 5xx) would inflate one pass's time: shown, not hidden.
            "retries": seq.get("judge retries", 0) + conc.get("judge retries", 0),
        })
    return rows


def totals(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    keys = ("entities", "evaluated", "failed", "calls", "retries", "calls_per_session", "tokens_per_session", "cost_per_session",
            "judge_s_sequential", "judge_s_concurrent")
    out = {k: sum(r[k] for r in rows) for k in keys}
    out["speedup"] = out["judge_s_sequential"] / out["judge_s_concurrent"] if out["judge_s_concurrent"] else None
    return out


def table(report: Mapping[str, Any]) -> str:
    c = report["concurrency"]
    lines = [
        f"{report['sessions']} {report['source']} sessions, judge {report['model']} on the local server, "
        f"{report['latency_s']} s per reply; concurrency 1 then {c}",
        "",
        f"| metric | entities | failed | calls/session | tokens/session | USD/session | judge s (1) | judge s ({c}) | speed-up |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def line(name: str, r: Mapping[str, Any]) -> str:
        speed = f"{r['speedup']:.1f}x" if r["speedup"] else "-"
        return (
            f"| {name} | {r['entities']} | {r['failed']} | {r['calls_per_session']:.2f} | {r['tokens_per_session']:,.0f} | "
            f"{r['cost_per_session']:.6f} | {r['judge_s_sequential']:.2f} | {r['judge_s_concurrent']:.2f} | {speed} |"
        )

    lines += [line(r["metric"], r) for r in report["metrics"]]
    lines.append(line("**all judged metrics**", report["totals"]))
    lines += [
        "",
        f"Dagster runs, wall: {report['wall_s_sequential']:.1f} s at concurrency 1, {report['wall_s_concurrent']:.1f} s at {c} "
        f"({report['wall_s_sequential'] / report['wall_s_concurrent']:.1f}x); "
        f"same results in both passes: {'yes' if report['same_results'] else 'NO'} ({report['results']} results); "
        f"judge calls retried: {report['totals']['retries']}",
    ]
    return "\n".join(lines)


def sources(args: argparse.Namespace, work: Path) -> tuple[list[Path], str]:
    if args.real_traces:
        missing = [f for f in REAL_FILES if not (REAL_TRACES / f).is_file()]
        if missing:
            raise SystemExit(f"real traces not found under {REAL_TRACES}: {missing}")
        return [REAL_TRACES / f for f in REAL_FILES], "real"
    from mce_dagster.synthetic import write_export

    return [write_export(work / "sessions.json", args.sessions, args.seed).path], "synthetic"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds the server takes per reply")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--model", default="gpt-4o-mini")
    parser.add_argument("--real-traces", action="store_true", help="the four real traces instead of synthetic sessions")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="mce-bench-"))
    os.environ["MCE_HOME"] = str(work / "home")
    os.environ["DAGSTER_HOME"] = str(work / "dagster")
    os.environ.setdefault("MODEL_PRICES_REFRESH", "false")

    from mce_dagster import service
    from mce_dagster.graph import stop_embedded_server

    try:
        paths, source = sources(args, work)
        ids = service.ingest(paths).sessions
        metrics = judged_metrics()
        with FakeOpenAI(responder(args.model), latency=args.latency) as server:
            os.environ.update({"LLM_MODEL_NAME": args.model, "OPENAI_API_KEY": "sk-local", "LLM_BASE_MODEL_URL_MCE": server.base_url})
            passes = {c: one_pass(ids, metrics, c) for c in (1, args.concurrency)}
    finally:
        stop_embedded_server()
        shutil.rmtree(work, ignore_errors=True)
    rows = metric_rows(metrics, len(ids), passes, args.concurrency)
    report: dict[str, Any] = {
        "source": source,
        "sessions": len(ids),
        "seed": None if args.real_traces else args.seed,
        "model": args.model,
        "latency_s": args.latency,
        "concurrency": args.concurrency,
        "metrics": rows,
        "totals": totals(rows),
        "wall_s_sequential": passes[1]["wall_s"],
        "wall_s_concurrent": passes[args.concurrency]["wall_s"],
        "results": len(passes[1]["results"]),
        "same_results": passes[1]["results"] == passes[args.concurrency]["results"],
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    try:
        report["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    results = REPO / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "judge.json").write_text(json.dumps(report, indent=2))
    print(table(report))


if __name__ == "__main__":
    main()
