"""The registry query (service.query_metric) on a hand-made graph: every number here
is stated in tests/registry_graph.py."""

from __future__ import annotations

import pytest

from mce_dagster import service
from mce_dagster.catalog import load_catalog
from mce_dagster.core.ontology import COMMON_PROPS, EXTRA_PROPS
from mce_dagster.graph import cypher
from mce_dagster.results.query import QueryRefused, load_result, rollup_of
from mce_dagster.settings import Settings

import registry_graph


@pytest.fixture(scope="module")
def graph(kg):
    registry_graph.build(kg)
    return kg


def q(graph, metric, **kw):
    return service.query_metric(metric, kg=graph, **kw)


def test_a_ratio_rolls_up_as_sum_over_sum_with_its_components(graph):
    answer = q(graph, "ToolErrorRate")
    (row,) = answer["rows"]
    assert (row["numerator"], row["denominator"], row["count"]) == (4.0, 12.0, 3)
    assert row["value"] == pytest.approx(4 / 12)
    # the mean of the three session rates is another number, and the wrong one
    assert row["value"] != pytest.approx((0.25 + 0.5 + 0.0) / 3)
    assert "sum(numerator) / sum(denominator)" in answer["rollup"]


def test_cut_by_app_and_by_agent(graph):
    by_app = {r["app"]: r for r in q(graph, "ToolErrorRate", by="app")["rows"]}
    assert (by_app["research"]["numerator"], by_app["research"]["denominator"]) == (4.0, 10.0)
    assert by_app["support"]["value"] == 0.0
    by_agent = {r["agent"]: r for r in q(graph, "ToolErrorRate", scope="AgentCall", by="agent")["rows"]}
    assert by_agent["researcher"]["value"] == pytest.approx(4 / 9) and by_agent["researcher"]["count"] == 2
    assert set(by_agent) == {"researcher", "writer", "triage"}


def test_filters_session_app_agent_and_window(graph):
    assert q(graph, "ToolErrorRate", session_id="s2")["rows"][0]["value"] == 0.5
    assert q(graph, "ToolErrorRate", app="support")["rows"][0]["denominator"] == 2.0
    (row,) = q(graph, "ToolErrorRate", scope="AgentCall", agent="researcher")["rows"]
    assert (row["numerator"], row["denominator"]) == (4.0, 9.0)
    march = q(graph, "ToolErrorRate", since="2025-03-01", until="2025-04-01")
    assert march["rows"][0]["denominator"] == 10.0 and march["window"]["incomplete"] is False


def test_counts_sum_and_durations_mean_with_count(graph):
    assert q(graph, "ToolCallCount")["rows"][0] == {"value": 12.0, "count": 3}
    assert q(graph, "Duration")["rows"][0] == {"value": 2000.0, "count": 3}
    per_session = {r["session"]: r["value"] for r in q(graph, "Duration", by="session")["rows"]}
    assert per_session == {"s1": 1000.0, "s2": 3000.0, "s3": 2000.0}


def test_periods_and_the_incomplete_one(graph):
    months = q(graph, "ToolErrorRate", by="month")
    assert [(r["month"], r["denominator"], r.get("incomplete", False)) for r in months["rows"]] == [
        ("2025-03", 10.0, False),
        ("2025-04", 2.0, True),  # s3 is the newest evaluated session: April is not over
    ]
    assert any(n.startswith("2025-04 is incomplete") for n in months["notes"])
    days = q(graph, "ToolErrorRate", by="day")["rows"]
    assert [r["day"] for r in days] == ["2025-03-03", "2025-03-20", "2025-04-02"]


def test_a_window_that_ends_after_the_newest_evaluated_session_says_so(graph):
    answer = q(graph, "ToolErrorRate", since="2025-04-01", until="2025-05-01")
    assert answer["window"]["incomplete"] is True
    assert answer["window"]["newest_evaluated_session"].startswith("2025-04-02")
    assert any("not complete" in n for n in answer["notes"])


@pytest.mark.parametrize(
    "kwargs, field, named",
    [
        ({"metric": "ToolErrorRate", "by": "tool"}, "by", "Allowed: app, session, day, month. (also agent at AgentCall scope)"),
        ({"metric": "ToolErrorRate", "scope": "AgentCall", "by": "model"}, "by", "Allowed: app, agent, session, day, month."),
        ({"metric": "ToolErrorRate", "scope": "LLMCall"}, "scope", "Allowed: Session, AgentCall"),
        ({"metric": "ToolErrorRate", "agent": "researcher"}, "agent", "Allowed filters here: session_id, app, since, until"),
        ({"metric": "ToolErrorRates"}, "metric", "ToolErrorRate"),
        ({"metric": "ToolErrorRate", "since": "last week"}, "since", "ISO 8601"),
        ({"metric": "ToolErrorRate", "since": "2025-05-01", "until": "2025-04-01"}, "until", "before"),
    ],
)
def test_what_is_not_allowed_is_refused_naming_what_is(graph, kwargs, field, named):
    metric = kwargs.pop("metric")
    with pytest.raises(QueryRefused) as refused:
        q(graph, metric, **kwargs)
    assert refused.value.field == field
    assert named in str(refused.value)


def test_the_answer_carries_its_cypher_and_is_kept_by_id(graph):
    answer = q(graph, "ToolErrorRate", scope="AgentCall", by="agent", app="research")
    assert answer["cypher"].startswith("MATCH (x:MetricResult)") and "$app" in answer["cypher"]
    assert "research" not in answer["cypher"]  # values are parameters
    assert answer["parameters"]["app"] == "research"
    assert len(graph.backend.query(answer["cypher"], answer["parameters"])) == 2  # the Cypher returned is the Cypher that ran
    # the same question over the same results has the same id; kept under MCE_HOME
    assert q(graph, "ToolErrorRate", scope="AgentCall", by="agent", app="research")["result_id"] == answer["result_id"]
    stored = load_result(Settings.from_env().mce_home, answer["result_id"])
    assert stored["rows"] == answer["rows"] and "researcher" in stored["vocabulary"]["agent"]


def test_an_answer_survives_a_restart_of_the_graph_and_the_process(graph, mce_home):
    import subprocess
    import sys

    answer = q(graph, "ToolErrorRate", by="app")
    code = (
        "import json; from mce_dagster import service; "
        f"print(json.dumps(service.verify_answer({answer['result_id']!r}, 'Research had 40%.')['passed']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={"MCE_HOME": str(mce_home), "PATH": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "true"


def test_every_cut_and_its_property_comes_from_the_ontology():
    for cut, (label, expression) in cypher.RESULT_DIMENSIONS.items():
        for prop in [p.split(".")[1] for p in expression.replace("(", " ").replace(")", " ").split() if p.startswith(("s.", "e."))]:
            assert prop in COMMON_PROPS + EXTRA_PROPS[label], (cut, prop)
    catalog = load_catalog()
    assert {rollup_of(catalog.find(n)) for n in ("ToolErrorRate", "AvgLLMCallDuration")} == {"ratio"}
    assert rollup_of(catalog.find("Duration")) == "mean" and rollup_of(catalog.find("Cost")) == "sum"
    assert rollup_of(catalog.find("MaxLLMCallDuration")) == "max"


def test_list_and_get_metric():
    names = {m["metric"] for m in service.list_metrics()}
    assert {"ToolErrorRate", "Duration"} <= names
    detail = service.get_metric("ToolErrorRate")
    assert detail["cuts"] == {"Session": ["app", "session", "day", "month"], "AgentCall": ["app", "agent", "session", "day", "month"]}
    assert detail["caveats"] and detail["version"] == 1 and detail["value_range"] == [0, 1]
    with pytest.raises(QueryRefused, match="Metrics: "):
        service.get_metric("NoSuchMetric")
