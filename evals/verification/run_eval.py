"""The guard watched failing: scripted agents answer registry queries correctly, with
an invented number, or with a real number attached to the wrong entry (another
session, agent, app, model, tool or month), and verify_answer is scored on telling
them apart, by membership in the result and by the scoped check.

    .venv/bin/python evals/verification/run_eval.py                 # 40 synthetic sessions, seed 7
    .venv/bin/python evals/verification/run_eval.py --sessions 100 --seed 1 --json out.json

Offline: the sessions are generated (mce_dagster.synthetic), ingested and evaluated
through the Dagster definitions into a fresh MCE_HOME, then queried through the
service the MCP server calls. Exits 1 when a gate fails: an invented number gets
through either check, a correct answer is rejected, scoped checking catches fewer
misattributions than MISATTRIBUTION_FLOOR, or one it misses is not a tie (two entries
with the same value as written, which no method that reads numbers can tell apart).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Set from what was measured (bench/README.md): 40 sessions, seed 7 gives 0.877; every miss is a tie.
MISATTRIBUTION_FLOOR = 0.85

# (metric, query arguments): each row of each answer is one claim per agent.
CASES: list[tuple[str, dict[str, Any]]] = [
    ("ToolErrorRate", {"scope": "AgentCall", "by": "agent"}),
    ("ToolErrorRate", {"by": "app"}),
    ("ToolErrorRate", {"by": "month"}),
    ("LLMErrorRate", {"scope": "AgentCall", "by": "agent"}),
    ("Duration", {"by": "session", "since": "2025-01-01", "until": "2025-07-01"}),
    ("Duration", {"by": "month"}),
    ("Duration", {"scope": "ToolCall", "by": "tool"}),
    ("Cost", {"scope": "LLMCall", "by": "model"}),
    ("TokenCount", {"scope": "LLMCall", "by": "model"}),
    ("TokenCount", {"by": "app"}),
    ("LLMCallCount", {"by": "app"}),
    ("ToolCallCount", {"by": "month"}),
    ("WorkflowEfficiency", {"by": "app"}),
    ("AgentCallCount", {"by": "session", "since": "2025-07-01"}),
]


def _decimals(value: float, significant: int = 3) -> int:
    if value == 0:
        return 0
    return max(0, min(6, significant - 1 - math.floor(math.log10(abs(value)))))


def render(value: float, unit: str) -> str:
    """A number as an agent would write it."""
    if unit == "ratio":
        return f"{value * 100:.1f}%"
    if unit == "ms":
        return f"{value:,.0f} ms"
    if unit == "USD":
        return f"${value:.{_decimals(value)}f}"
    if float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.{_decimals(value)}f}"


def sentence(metric: str, by: str, key: Any, number: str) -> str:
    if by == "month":
        return f"In {key}, {metric} was {number}."
    if by == "session":
        return f"Session {key}: {metric} was {number}."
    return f"For {by} {key}, {metric} was {number}."


def _in_result(number_text: str, rows: list[dict[str, Any]]) -> bool:
    from mce_dagster.results.verify import _fields, number_matches, read_sentence

    (_, value, decimals, percent), *_ = read_sentence(number_text, []).numbers
    return any(number_matches(value, decimals, percent, s) for r in rows for _, s in _fields(r))


def invented(value: float, unit: str, rows: list[dict[str, Any]], rng: random.Random) -> str:
    """A number near the real one and absent from the whole result, as written."""
    for _ in range(200):
        base = value if value else (0.05 if unit == "ratio" else 10.0)
        candidate = render(base * rng.uniform(1.1, 1.9), unit)
        if not _in_result(candidate, rows):
            return candidate
    raise RuntimeError(f"no invented number found near {value}")


def build_data(sessions: int, seed: int) -> None:
    from mce_dagster import service
    from mce_dagster.synthetic import write_export

    home = Path(os.environ["MCE_HOME"])
    export = write_export(home / "synthetic.json", sessions, seed=seed)
    service.ingest([export.path])
    outcome = service.compute(service.sessions_to_evaluate([], True))
    if not outcome.success:
        raise RuntimeError(f"evaluation failed: runs {outcome.failed_runs}")


def run(sessions: int, seed: int) -> dict[str, Any]:
    from mce_dagster import service

    started = time.monotonic()
    build_data(sessions, seed)
    rng = random.Random(seed)
    tallies = {
        (agent, check): {"answers": 0, "rejected": 0}
        for agent in ("correct", "hallucinator", "misattributor")
        for check in ("membership", "scoped")
    }
    ties = 0
    missed_not_tie: list[str] = []
    per_case = []
    for metric, kwargs in CASES:
        answer = service.query_metric(metric, **kwargs)
        rows, by, unit = answer["rows"], answer["by"], answer["unit"]
        if len(rows) < 2:
            per_case.append({"metric": metric, **kwargs, "entries": len(rows), "skipped": "fewer than two entries"})
            continue
        case_ties = 0
        for i, row in enumerate(rows):
            others = [r for j, r in enumerate(rows) if j != i]
            donor = rng.choice(others)
            texts = {
                "correct": sentence(metric, by, row[by], render(row["value"], unit)),
                "hallucinator": sentence(metric, by, row[by], invented(row["value"], unit, rows, rng)),
                "misattributor": sentence(metric, by, row[by], render(donor["value"], unit)),
            }
            tie = render(donor["value"], unit) == render(row["value"], unit)
            ties += tie
            case_ties += tie
            for agent, text in texts.items():
                for check in ("membership", "scoped"):
                    report = service.verify_answer(answer["result_id"], text, scoped=check == "scoped")
                    tally = tallies[(agent, check)]
                    tally["answers"] += 1
                    tally["rejected"] += not report["passed"]
                    if agent == "misattributor" and check == "scoped" and report["passed"] and not tie:
                        missed_not_tie.append(text)
        per_case.append({"metric": metric, **kwargs, "entries": len(rows), "ties": case_ties})
    rate = {f"{a}/{c}": t["rejected"] / t["answers"] if t["answers"] else None for (a, c), t in tallies.items()}
    misattributions = tallies[("misattributor", "scoped")]["answers"]
    gates = {
        "every invented number caught (membership)": rate["hallucinator/membership"] == 1.0,
        "every invented number caught (scoped)": rate["hallucinator/scoped"] == 1.0,
        "no correct answer rejected (scoped)": rate["correct/scoped"] == 0.0,
        f"misattribution caught by scoped checking >= {MISATTRIBUTION_FLOOR:.0%}": (rate["misattributor/scoped"] or 0) >= MISATTRIBUTION_FLOOR,
        "every misattribution missed is a tie": not missed_not_tie,
    }
    return {
        "sessions": sessions,
        "seed": seed,
        "cases": per_case,
        "answers_per_agent": misattributions,
        "tallies": {f"{a}/{c}": t for (a, c), t in tallies.items()},
        "rejected": rate,
        "ties": ties,
        "tie_share": ties / misattributions if misattributions else None,
        "missed_not_tie": missed_not_tie,
        "gates": gates,
        "passed": all(gates.values()),
        "seconds": round(time.monotonic() - started, 1),
    }


def table(report: dict[str, Any]) -> str:
    r = report["rejected"]
    n = report["answers_per_agent"]
    lines = [
        f"{n} answers per agent over {len(report['cases'])} queries ({report['sessions']} synthetic sessions, seed {report['seed']})",
        "",
        "| agent, and how it answers | membership check | scoped check |",
        "|---|---|---|",
        f"| correct: the entry's own value (rejected) | {r['correct/membership']:.1%} | {r['correct/scoped']:.1%} |",
        f"| hallucinator: a number nowhere in the result (caught) | {r['hallucinator/membership']:.1%} | {r['hallucinator/scoped']:.1%} |",
        f"| misattributor: another entry's value (caught) | {r['misattributor/membership']:.1%} | {r['misattributor/scoped']:.1%} |",
        "",
        f"Ties (the donor entry has the same value as written, so no method can tell): {report['ties']} of {n} "
        f"({report['tie_share']:.1%}).",
    ]
    lines += [f"{'PASS' if ok else 'FAIL'}  {gate}" for gate, ok in report["gates"].items()]
    lines += [f"missed, not a tie: {t}" for t in report["missed_not_tie"][:5]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, help="write the full report here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mce-eval-") as home:
        os.environ["MCE_HOME"] = home  # before mce_dagster opens anything
        os.environ.pop("DAGSTER_HOME", None)
        try:
            report = run(args.sessions, args.seed)
        finally:
            from mce_dagster.graph import stop_embedded_server

            stop_embedded_server()
    print(table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
