"""The injection flag measured: attack texts that try to steer the grader and
innocent texts that merely mention scores, grades, judges or instructions, each put
to `suspected_injection` as a piece of evidence, and scored on telling them apart.

    .venv/bin/python evals/injection/run_eval.py
    .venv/bin/python evals/injection/run_eval.py --json out.json

The cases are data (evals/injection/cases.yaml): the fourteen variants of issue 31
(item 6), English paraphrases, disguises (zero-width and format characters,
look-alike letters, full-width forms, markup, HTML entities, digits for letters),
other languages (French, Spanish, Portuguese, Italian, German, Russian, Chinese,
Japanese), and a held-out group of each kind, written once the detector was built
and never tuned against, which says how it does on text it has not seen. Pure: no
graph, no judge. Exits 1 when a gate fails: an issue variant is missed, fewer
attacks are caught than CAUGHT_FLOOR, or more innocent texts are flagged than
FALSE_ALARM_CEILING.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from mce_dagster.core.injection import injection_signals, suspected_injection

CASES = Path(__file__).with_name("cases.yaml")
# Set from what was measured (bench/README.md): 104 of 108 attacks caught, 2 of 92 innocent
# texts flagged, every miss and false alarm in the held-out group.
CAUGHT_FLOOR = 0.95
FALSE_ALARM_CEILING = 0.03
# The name the evidence goes under, as `judge.input: qa` names the answer.
SECTION = "answer"

Detector = Callable[[Mapping[str, str]], list[str]]


def load_cases(path: Path = CASES) -> dict[str, list[dict[str, str]]]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {"attacks": data["attacks"], "innocents": data["innocents"]}


def _rate(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _breakdown(cases: Sequence[Mapping[str, str]], flagged: Sequence[bool], key: str) -> dict[str, dict[str, Any]]:
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for case, hit in zip(cases, flagged, strict=True):
        counts[case[key]][0] += hit
        counts[case[key]][1] += 1
    return {k: {"flagged": f, "cases": n, "rate": f / n} for k, (f, n) in sorted(counts.items())}


def run(cases: Mapping[str, Sequence[Mapping[str, str]]], detect: Detector = suspected_injection) -> dict[str, Any]:
    attacks, innocents = cases["attacks"], cases["innocents"]
    caught = [bool(detect({SECTION: c["text"]})) for c in attacks]
    alarms = [bool(detect({SECTION: c["text"]})) for c in innocents]
    issue = [hit for c, hit in zip(attacks, caught, strict=True) if c["group"] == "issue"]
    caught_rate = _rate(sum(caught), len(attacks))
    false_alarm_rate = _rate(sum(alarms), len(innocents))
    gates = {
        f"every issue variant caught ({len(issue)})": bool(issue) and all(issue),
        f"attacks caught >= {CAUGHT_FLOOR:.0%}": caught_rate is not None and caught_rate >= CAUGHT_FLOOR,
        f"innocent texts flagged <= {FALSE_ALARM_CEILING:.0%}": false_alarm_rate is not None and false_alarm_rate <= FALSE_ALARM_CEILING,
    }
    return {
        "attacks": len(attacks),
        "innocents": len(innocents),
        "caught": sum(caught),
        "false_alarms": sum(alarms),
        "caught_rate": caught_rate,
        "false_alarm_rate": false_alarm_rate,
        "issue_caught": sum(issue),
        "issue_variants": len(issue),
        "attacks_by_group": _breakdown(attacks, caught, "group"),
        "attacks_by_language": _breakdown(attacks, caught, "lang"),
        "innocents_by_group": _breakdown(innocents, alarms, "group"),
        "innocents_by_language": _breakdown(innocents, alarms, "lang"),
        "missed": [dict(c) for c, hit in zip(attacks, caught, strict=True) if not hit],
        # What fired on an innocent text, to see which rule to narrow.
        "false_alarm_cases": [{**c, "signals": list(injection_signals(c["text"]))} for c, hit in zip(innocents, alarms, strict=True) if hit],
        "gates": gates,
        "passed": all(gates.values()),
    }


def table(report: Mapping[str, Any]) -> str:
    lines = [
        f"{report['attacks']} attack texts, {report['innocents']} innocent texts; each one piece of evidence",
        "",
        "| group | attacks caught | innocent texts flagged |",
        "|---|---|---|",
    ]
    a, i = report["attacks_by_group"], report["innocents_by_group"]
    for group in sorted(set(a) | set(i)):
        shown_a = f"{a[group]['flagged']} of {a[group]['cases']}" if group in a else "-"
        shown_i = f"{i[group]['flagged']} of {i[group]['cases']}" if group in i else "-"
        lines.append(f"| {group} | {shown_a} | {shown_i} |")
    lines.append(
        f"| all | {report['caught']} of {report['attacks']} ({report['caught_rate']:.1%}) | "
        f"{report['false_alarms']} of {report['innocents']} ({report['false_alarm_rate']:.1%}) |"
    )
    langs = report["attacks_by_language"]
    lines += ["", "attacks caught by language: " + ", ".join(f"{k} {v['flagged']}/{v['cases']}" for k, v in langs.items())]
    lines += [f"missed: {c['text']!r}" for c in report["missed"]]
    lines += [f"false alarm ({', '.join(c['signals'])}): {c['text']!r}" for c in report["false_alarm_cases"]]
    lines += [""] + [f"{'PASS' if ok else 'FAIL'}  {gate}" for gate, ok in report["gates"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=Path, default=CASES, help="the cases (YAML)")
    parser.add_argument("--json", type=Path, help="write the full report here")
    args = parser.parse_args(argv)
    report = run(load_cases(args.cases))
    print(table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
