"""The `mce` command as a person runs it (each call a fresh process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO
from test_ingest import row

MCE = str(REPO / ".venv" / "bin" / "mce")
KEYS = {
    "metric", "provider", "scope", "entity_id", "session_id", "value", "numerator", "denominator", "reasoning",
    "method", "evaluation_model", "evaluation_prompt_tokens", "evaluation_completion_tokens",
    "evaluation_total_tokens", "evaluation_cost", "metric_version", "computed_at",
}


def mce(home, *args, check=True, env=None):
    env = {**os.environ, "MCE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), **(env or {})}
    done = subprocess.run([MCE, *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    if check:
        assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_catalog_commands(mce_home):
    listed = json.loads(mce(mce_home, "metric", "list", "--json").stdout)
    by_name = {m["name"]: m for m in listed}
    assert by_name["ToolErrorRate"]["scopes"] == ["Session", "AgentCall"]
    assert by_name["WorkflowEfficiency"]["depends_on"] == ["AgentToAgentInteractions"]
    shown = mce(mce_home, "metric", "show", "Cost").stdout
    assert "priced as gpt-4o" in shown and "USD" in shown
    assert "native" in mce(mce_home, "provider", "list").stdout
    missing = mce(mce_home, "metric", "show", "Nope", check=False)
    assert missing.returncode == 2 and "no metric named 'Nope'" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1 and "Traceback" not in missing.stderr


def test_user_errors_are_one_line_and_exit_2(mce_home, tmp_path):
    for args, says in (
        (("compute", "--metrics", ",", "some-session"), "names no metric"),
        (("compute", "--metrics", "Session/Nope", "some-session"), "no metric named 'Nope'"),
        (("compute", "a", "--all"), "not both"),
    ):
        done = mce(mce_home, *args, check=False)
        assert done.returncode == 2, (args, done.stderr)
        assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
    # A session the graph does not hold: exit 1, as every command that reads results answers.
    for args, says in ((("compute", "never-ingested"), "not in the knowledge graph: never-ingested"),):
        done = mce(mce_home, *args, check=False)
        assert done.returncode == 1, (args, done.stderr)
        assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
    config = tmp_path / "bad_config.yaml"
    config.write_text("metrics:\n  Session: [NoSuchMetric]\n")
    done = mce(mce_home, "compute", "x", check=False, env={"MCE_CONFIG": str(config)})
    assert done.returncode == 2 and "NoSuchMetric" in done.stderr and "Traceback" not in done.stderr


def test_a_bug_keeps_its_traceback(mce_home, tmp_path):
    """Only MCEErrors become one-line messages: anything else is a bug and shows where."""
    script = (
        "import mce_dagster.service as s\n"
        "def broken(*a, **k): raise ZeroDivisionError('a bug')\n"
        "s.graph_status = broken\n"
        "from mce_dagster.cli import app\n"
        "app(['kg', 'status'])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MCE_HOME": str(mce_home)})
    assert done.returncode == 1 and "ZeroDivisionError" in done.stderr and "Traceback" in done.stderr


def test_ingest_compute_and_read_back(mce_home, real_traces, tmp_path):
    trace = real_traces / "llm_single_session.json"
    session = "outshift_langgraph_app_0ef9ae3d-bbe0-4e6a-861a-6d9d22dd0f09"
    bad = tmp_path / "bad.json"
    broken = row("b1", "x.tool", start="soon")
    bad.write_text(json.dumps([broken]))
    ingested = mce(mce_home, "ingest", str(trace), str(bad))
    assert "ingested 1 sessions (9 spans)" in ingested.stdout
    assert "row not placed" in ingested.stderr and "bad Timestamp 'soon'" in ingested.stderr
    assert mce(mce_home, "ingest", str(bad), "--strict", check=False).returncode == 1

    computed = mce(mce_home, "compute", session)
    assert "evaluated 1 session(s) in 1 Dagster run(s)" in computed.stdout

    rows = json.loads(mce(mce_home, "kg", "metric", "get", session, "--json").stdout)
    assert rows and all(KEYS <= set(r) for r in rows)
    assert {r["scope"] for r in rows} == {"Session"}
    by_metric = {r["metric"]: r for r in rows}
    assert by_metric["LLMCallCount"]["value"] == 2.0
    assert by_metric["TokenCount"]["value"] == 190 + 225  # llm.usage.total_tokens of its two LLM spans
    assert by_metric["Cost"]["evaluation_cost"] == 0.0 and by_metric["Cost"]["evaluation_model"] is None
    deep = json.loads(mce(mce_home, "kg", "metric", "get", session, "--recursive", "--json").stdout)
    assert {"Session", "LLMCall", "ToolCall"} <= {r["scope"] for r in deep}

    unknown = mce(mce_home, "compute", session, "--metrics", "Nope", check=False)
    assert unknown.returncode == 2 and "no metric named 'Nope'" in unknown.stderr
    assert "OK" in mce(mce_home, "kg", "check").stdout


def test_compute_says_which_metrics_failed_and_exits_1(mce_home, tmp_path):
    export = tmp_path / "nousage.json"
    export.write_text(json.dumps([
        row("nu-wf", "a.workflow", session="cli-no-usage", duration_ns=2_000_000_000),
        row("nu-llm", "x.chat", parent="nu-wf", session="cli-no-usage", **{"gen_ai.request.model": "gpt-4o"}),
    ]))
    mce(mce_home, "ingest", str(export))
    computed = mce(mce_home, "compute", "cli-no-usage", check=False)
    assert computed.returncode == 1, computed.stderr[-2000:]
    assert "metrics failed:" in computed.stderr and "LLMCall/TokenCount on 1" in computed.stderr
    rows = json.loads(mce(mce_home, "kg", "metric", "get", "cli-no-usage", "--recursive", "--json").stdout)
    stored = {(r["scope"], r["metric"]) for r in rows}
    assert ("LLMCall", "TokenCount") not in stored and ("Session", "Duration") in stored


def test_kg_check_names_a_missing_required_property(tmp_path):
    from typer.testing import CliRunner

    from mce_dagster.cli import app
    from mce_dagster.graph.embedded import EmbeddedFalkorDB
    from mce_dagster.graph.store import KnowledgeGraph, embedded_backend

    home = tmp_path / "h"
    try:
        kg = KnowledgeGraph(embedded_backend(home))
        kg.backend.query("CREATE (:ToolCall {id: 'x', sessionId: 's', name: 'n', startTime: 0.0, endTime: 1.0, duration: 1000.0})")
        result = CliRunner().invoke(app, ["kg", "check"], env={"MCE_HOME": str(home)})
        assert result.exit_code == 1
        assert "CyclesCount: ToolCall.toolName" in result.output
    finally:
        EmbeddedFalkorDB(home).stop()


def test_demo_summarises_what_the_graph_holds(mce_home):
    import http.server
    import threading

    # The demo is offline: the price table URL, pointed at a local server, is never asked.
    asked = []

    class Prices(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            self.send_error(404)

    server = http.server.HTTPServer(("127.0.0.1", 0), Prices)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/prices.json"
    env = {k: v for k, v in os.environ.items() if k != "MODEL_PRICES_REFRESH"}
    env.update(MCE_HOME=str(mce_home), DAGSTER_HOME=str(mce_home / "dagster"), MODEL_PRICES_URL=url)
    try:
        done = subprocess.run([MCE, "demo", "--sessions", "6", "--seed", "3"], capture_output=True, text=True,
                              env=env, cwd=REPO, timeout=300)
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr[-3000:]
    assert asked == [] and "price table not refreshed" not in done.stderr + done.stdout
    shown = done.stdout
    assert "1. generated 6 synthetic sessions" in shown
    assert "ingested 6 sessions" in shown and "0 row(s) not placed" in shown
    assert "evaluated them in 1 Dagster run(s)" in shown
    # Every session has LLM calls, so the Session/LLMCallCount row counts all six.
    line = next(l for l in shown.splitlines() if "Session" in l and "LLMCallCount" in l)
    assert line.split("│")[3].strip() == "6"
    assert "dagster dev -w workspace.yaml" in shown


def test_summary_pools_ratios_and_ranks_sessions():
    from mce_dagster.results import summarize, top_sessions

    def result(session, value, num=None, den=None, metric="ToolErrorRate"):
        return {"scope": "Session", "metric": metric, "session_id": session, "value": value,
                "numerator": num, "denominator": den}

    # One failure in one call, none in nine: the mean of rates is 0.5, the pooled rate 1/10.
    rows = [result("a", 1.0, 1, 1), result("b", 0.0, 0, 9)]
    [s] = summarize(rows)
    assert (s.evaluated, s.mean, s.minimum, s.maximum) == (2, 0.5, 0.0, 1.0)
    assert s.pooled == 0.1
    [plain] = summarize([result("a", 3.0, metric="CyclesCount")])
    assert plain.pooled is None
    errors = [result(s, v, metric="SumToolError") for s, v in [("a", 2.0), ("b", 0.0), ("c", 5.0), ("d", 2.0)]]
    assert top_sessions(errors, "SumToolError") == [("c", 5.0), ("a", 2.0), ("d", 2.0)]
