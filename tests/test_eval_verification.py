"""The verification eval as a CI gate (evals/verification/run_eval.py): every invented
number caught by both checks, no correct answer rejected, misattribution caught by
the scoped check at the floor set from what was measured, and every miss a tie."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_guard_is_seen_failing_the_bad_agents(tmp_path):
    out = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k not in ("MCE_HOME", "DAGSTER_HOME")}
    done = subprocess.run(
        [sys.executable, str(REPO / "evals" / "verification" / "run_eval.py"), "--json", str(out)],
        capture_output=True, text=True, timeout=300, env=env, cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["rejected"]["hallucinator/membership"] == 1.0 and report["rejected"]["hallucinator/scoped"] == 1.0
    # membership cannot see a real number on the wrong entry; the scoped check can
    assert report["rejected"]["misattributor/membership"] == 0.0
    assert report["rejected"]["misattributor/scoped"] >= 0.85  # MISATTRIBUTION_FLOOR
    assert report["answers_per_agent"] > 100
