"""The evaluation report (`mce report`, the asset `evaluation_report`) on the
hand-made graph of tests/registry_graph.py: the numbers it shows are checked against
the stored results, read here directly."""

from __future__ import annotations

import base64
import json
import statistics
from collections import defaultdict
from html.parser import HTMLParser

import dagster as dg
import pytest

from mce_dagster import service
from mce_dagster.report.model import distributions, histogram

import registry_graph
from test_cli import mce


@pytest.fixture(scope="module")
def graph(kg):
    registry_graph.build(kg)
    return kg


def stored(kg) -> list[dict]:
    return kg.read_results(kg.session_ids())


class Page(HTMLParser):
    """The images and roll-up cells of a report page."""

    def __init__(self):
        super().__init__()
        self.images: list[dict] = []
        self.cells: dict[tuple[str, str, str], float] = {}  # (cut, metric, group) -> value
        self._table: dict | None = None
        self._group: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.images.append(a)
        elif tag == "table" and a.get("class") == "rollup":
            self._table = a
        elif tag == "tr" and self._table is not None:
            self._group = a.get("data-group")
        elif tag == "td" and a.get("class") == "value" and self._table is not None and a.get("data-value"):
            self.cells[(self._table["data-cut"], self._table["data-metric"], self._group)] = float(a["data-value"])

    def handle_endtag(self, tag):
        if tag == "table":
            self._table = None


def read_page(path) -> tuple[str, Page]:
    text = path.read_text(encoding="utf-8")
    page = Page()
    page.feed(text)
    return text, page


def test_histograms_count_every_value_once():
    values = [0.0, 0.1, 0.1, 0.25, 0.5, 0.5, 0.9, 1.0]
    h = histogram(values)
    assert sum(h.counts) == len(values) and len(h.edges) == len(h.counts) + 1
    assert h.edges[0] <= min(values) and h.edges[-1] >= max(values)
    counts = histogram([2, 3, 3, 7])  # integers over a short range: one bar per value
    assert len(counts.counts) == 6 and counts.counts[0] == 1 and counts.counts[1] == 2 and counts.counts[-1] == 1


def test_a_distribution_pools_ratios_as_sum_over_sum():
    rows = [
        {"scope": "Session", "provider": "native", "metric": "ToolErrorRate", "session_id": s, "value": n / d, "numerator": n, "denominator": d, "metric_version": 1}
        for s, n, d in (("a", 1.0, 1.0), ("b", 0.0, 9.0))
    ]
    (d,) = distributions(rows)
    assert d.summary.pooled == pytest.approx(1 / 10) and d.summary.mean == pytest.approx(0.5)
    assert distributions(rows, versions={("native", "ToolErrorRate"): 2}) == []  # older versions left out


def test_an_empty_report_says_so():
    from mce_dagster.report.html import render
    from mce_dagster.report.model import Report

    page = render(Report(0, 0, 0, (), (), "2025-01-01T00:00:00Z"), {}, {})
    assert "0 evaluated sessions" in page and "No metric with results can be rolled up per app" in page and "<img" not in page


def test_the_html_is_standalone_with_one_image_per_metric(graph, tmp_path):
    path, report = service.write_report(tmp_path / "report.html", kg=graph)
    text, page = read_page(path)
    assert "http://" not in text and "https://" not in text and "<script" not in text and "<link" not in text
    assert all(img["src"].startswith("data:image/png;base64,") for img in page.images)
    assert all(base64.b64decode(img["src"].split(",", 1)[1]).startswith(b"\x89PNG") for img in page.images)
    metrics = {f"{r['scope']}/{r['name']}" for r in stored(graph)}
    shown = [img["data-metric"] for img in page.images if img.get("class") == "distribution"]
    assert sorted(shown) == sorted(metrics)
    assert report.sessions == len(registry_graph.SESSIONS)


def test_the_rollups_in_the_html_are_the_stored_results_rolled_up(graph, tmp_path):
    path, _ = service.write_report(tmp_path / "report.html", kg=graph)
    _, page = read_page(path)
    app_of = {s["id"]: s["app"] for s in graph.select_sessions()}
    agent_of = {r["id"]: r["agent"] for r in graph.backend.query("MATCH (a:AgentCall) RETURN a.id AS id, a.agentName AS agent")}
    results = stored(graph)

    def sum_over_sum(scope, name, group_of):
        parts = defaultdict(lambda: [0.0, 0.0])
        for r in results:
            if r["scope"] == scope and r["name"] == name:
                parts[group_of(r)][0] += r["numerator"]
                parts[group_of(r)][1] += r["denominator"]
        return {g: n / d for g, (n, d) in parts.items()}

    expected_app = sum_over_sum("Session", "ToolErrorRate", lambda r: app_of[r["sessionId"]])
    expected_agent = sum_over_sum("AgentCall", "ToolErrorRate", lambda r: agent_of[r["entityId"]])
    assert len(expected_app) > 1 and len(expected_agent) > 1
    for app, value in expected_app.items():
        assert page.cells[("app", "Session/ToolErrorRate", app)] == pytest.approx(value, rel=1e-12)
    for agent, value in expected_agent.items():
        assert page.cells[("agent", "AgentCall/ToolErrorRate", agent)] == pytest.approx(value, rel=1e-12)
    # a mean of per-session rates would be another number for the app with two sessions
    research = [r["result"] for r in results if r["scope"] == "Session" and r["name"] == "ToolErrorRate" and app_of[r["sessionId"]] == "research"]
    assert page.cells[("app", "Session/ToolErrorRate", "research")] != pytest.approx(statistics.fmean(research))
    durations = defaultdict(list)
    for r in results:
        if r["scope"] == "Session" and r["name"] == "Duration":
            durations[app_of[r["sessionId"]]].append(r["result"])
    for app, values in durations.items():
        assert page.cells[("app", "Session/Duration", app)] == pytest.approx(statistics.fmean(values))


def test_mce_report_writes_the_file_under_mce_home(graph, mce_home):
    done = mce(mce_home, "report", "--json")
    answer = json.loads(done.stdout)
    path = mce_home / "reports" / "evaluation_report.html"
    assert answer["path"] == str(path) and path.is_file()
    assert answer["sessions"] == len(registry_graph.SESSIONS)
    assert {d["metric"] for d in answer["distributions"]} == {f"{r['scope']}/{r['name']}" for r in stored(graph)}
    plain = mce(mce_home, "report", "--output", str(mce_home / "other.html"))
    assert "Session/ToolErrorRate" in plain.stdout and (mce_home / "other.html").is_file()


def test_the_asset_materializes_with_its_pictures(graph, mce_home):
    from mce_dagster.definitions import build_definitions, runtime
    from mce_dagster.defs.report import EVALUATION_REPORT_KEY, REPORT_GROUP, evaluation_report

    defs = build_definitions(*runtime())
    node = defs.resolve_asset_graph().get(EVALUATION_REPORT_KEY)
    assert node.group_name == REPORT_GROUP and not node.partitions_def and not node.parent_keys
    result = dg.materialize(
        [evaluation_report],
        resources={k: defs.resources[k] for k in ("knowledge_graph", "local_files")},
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    (event,) = result.get_asset_materialization_events()
    metadata = event.event_specific_data.materialization.metadata
    metrics = {f"{r['scope']}/{r['name']}" for r in stored(graph)}
    assert metadata["distributions"].value.count("data:image/png;base64,") == len(metrics) == metadata["metrics"].value
    assert "data:image/png;base64," in metadata["per app"].value and "data:image/png;base64," in metadata["per agent"].value
    assert metadata["report"].value == str(mce_home / "reports" / "evaluation_report.html")
