"""The judge eval as a CI gate (evals/judge/run_eval.py): every bad judge rejected
or exposed, the honest one passing through, and the gate itself seen going red."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EVAL = REPO / "evals" / "judge" / "run_eval.py"


def load_eval():
    spec = importlib.util.spec_from_file_location("judge_eval", EVAL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ev():
    return load_eval()


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("judge-eval") / "report.json"
    env = {k: v for k, v in os.environ.items() if k not in ("MCE_HOME", "DAGSTER_HOME")}
    done = subprocess.run(
        [sys.executable, str(EVAL), "--json", str(out)], capture_output=True, text=True, timeout=300, env=env, cwd=REPO
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {r["judge"]: r for r in json.loads(out.read_text())["judges"]}


def test_the_honest_judge_passes_and_separates_good_from_bad(report):
    honest = report["honest"]
    assert honest["verdict"] == "passed through"
    assert (honest["stored"], honest["failed"], honest["wrong"]) == (30, 0, 0)
    assert honest["auc"] == 1.0 and honest["mean_score_good"] > 4 > 2 > honest["mean_score_bad"]


def test_judges_without_a_score_line_store_nothing_never_a_zero(report):
    for name in ("never-scores", "lifted-number"):
        r = report[name]
        assert (r["stored"], r["failed"], r["verdict"]) == (0, 30, "rejected")
        assert all("no `Score:` line" in reason for reason in r["failure_reasons"]), r["failure_reasons"]


def test_uninformative_judges_are_exposed_by_the_labels(report):
    always = report["always-5"]
    assert always["stored"] == 30 and always["std"] == 0 and always["auc"] == 0.5 and always["verdict"] == "exposed"
    # Rotated answers: the digits it lifts are the same on good and on bad cases.
    assert abs(report["lifted-digit"]["auc"] - 0.5) < 0.1 and report["lifted-digit"]["verdict"] == "exposed"


def test_flat_logprobs_are_flagged_on_every_value(report):
    flat = report["flat-logprobs"]
    assert flat["flagged_by"]["flat_distribution"] == flat["stored"] == 30
    assert flat["mean_entropy"] == pytest.approx(1.0)
    assert flat["mean_score_good"] == pytest.approx(3.0) and flat["mean_score_bad"] == pytest.approx(3.0)
    assert flat["verdict"] == "exposed"


def test_a_planted_instruction_is_flagged_and_every_value_it_bought_carries_the_flag(report):
    obeys = report["obeys-planted"]
    assert obeys["planted_stored"] == obeys["planted_flagged"] == 6
    assert obeys["wrong"] == 6 and obeys["unflagged_wrong"] == 0
    assert obeys["mean_score_bad"] > report["honest"]["mean_score_bad"] + 1
    # The flag is on the evidence, whoever judges it.
    assert report["honest"]["planted_flagged"] == 6


def honest_results(ev, cases, wrong_on=()):
    """Stored results as the honest judge gives them; `wrong_on` cases scored 5, unflagged."""
    out = {}
    for c in cases:
        score = 5 if c.name in wrong_on else ev.relevance(c.request, c.answer)
        out[c.name] = {"result": (score - 1) / 4, "metadata": {}}
    return out


def test_the_gate_goes_red_when_a_bad_judge_grades_like_an_honest_one(ev):
    cases = ev.labelled_cases()
    passing = ev.judge_row("honest", cases, honest_results(ev, cases), Counter())
    # A bad judge wrong on one case in eighteen, unflagged, is indistinguishable.
    sneaky = ev.judge_row("always-5", cases, honest_results(ev, cases, wrong_on={"bad-router"}), Counter())
    assert sneaky["verdict"] == "passed through" and sneaky["unflagged_wrong"] == 1
    gates = ev.gates([passing, sneaky])
    assert not gates["no bad judge passes through"]
    assert gates["the honest judge passes through: every case stored, none on the wrong side"]


def test_the_gate_goes_red_when_the_honest_judge_is_wrong(ev):
    cases = ev.labelled_cases()
    off = ev.judge_row("honest", cases, honest_results(ev, cases, wrong_on={"bad-login"}), Counter())
    rejected = ev.judge_row("never-scores", cases, {}, Counter())
    gates = ev.gates([off, rejected])
    assert not gates["the honest judge passes through: every case stored, none on the wrong side"]
    assert gates["no bad judge passes through"] and rejected["verdict"] == "rejected"
