"""The catalog: definitions validated, errors that name what is wrong, plugins."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from mce_dagster.catalog import DEFAULT_DEFS_DIR, CatalogError, load_catalog
from mce_dagster.config import ConfigError, load_config
from mce_dagster.core.metric import DependencyKey
from mce_dagster.core.ontology import Scope

BASE = """\
name: {name}
provider: native
kind: deterministic
scopes: [Session]
unit: x
value_range: [0, null]
version: 1
description: d
"""


def defs_dir(tmp_path: Path, *docs: str) -> Path:
    folder = tmp_path / "defs"
    folder.mkdir(exist_ok=True)
    for i, doc in enumerate(docs):
        (folder / f"m{i}.yaml").write_text(textwrap.dedent(doc))
    return folder


def test_the_shipped_catalog_loads():
    catalog = load_catalog(plugins=[])
    names = {d.name for d in catalog.definitions.values()}
    for required in ("Duration", "TokenCount", "Cost", "LLMCallCount", "ToolCallCount", "AgentCallCount", "ToolError",
                     "ToolErrorRate", "LLMErrorRate", "CyclesCount", "AgentToAgentInteractions",
                     "AgentToToolInteractions", "WorkflowEfficiency"):
        assert required in names
    assert set(catalog.definitions[("native", "Duration")].scopes) == {
        Scope.SESSION, Scope.MAS_CALL, Scope.AGENT_CALL, Scope.TASK_CALL, Scope.LLM_CALL, Scope.TOOL_CALL
    }
    avg = catalog.metrics[DependencyKey(Scope.SESSION, "AvgLLMCallDuration")]
    assert avg.dependencies == (DependencyKey(Scope.LLM_CALL, "Duration"),)


@pytest.mark.parametrize(
    "change, message",
    [
        ("colour: red\n", "unknown field 'colour'"),
        ("", None),
    ],
)
def test_unknown_field(tmp_path, change, message):
    folder = defs_dir(tmp_path, BASE.format(name="Duration") + change)
    if message is None:
        load_catalog(folder, plugins=[])
        return
    with pytest.raises(CatalogError, match=message) as info:
        load_catalog(folder, plugins=[])
    assert "m0.yaml" in str(info.value)


def test_unknown_scope(tmp_path):
    folder = defs_dir(tmp_path, BASE.format(name="Duration").replace("[Session]", "[Sesion]"))
    with pytest.raises(CatalogError, match="scopes.0") as info:
        load_catalog(folder, plugins=[])
    assert "Sesion" in str(info.value) or "Session" in str(info.value)


def test_unknown_provider(tmp_path):
    folder = defs_dir(tmp_path, BASE.format(name="Duration").replace("provider: native", "provider: acme"))
    with pytest.raises(CatalogError, match="unknown provider 'acme'"):
        load_catalog(folder, plugins=[])


def test_unknown_dependency(tmp_path):
    folder = defs_dir(tmp_path, BASE.format(name="Duration") + "depends_on: [LLMCall/Nope]\n")
    with pytest.raises(CatalogError, match="depends on LLMCall/Nope, which no definition provides"):
        load_catalog(folder, plugins=[])


def test_dependency_cycle_is_named(tmp_path):
    folder = defs_dir(
        tmp_path,
        BASE.format(name="Duration") + "depends_on: [Cost]\n",
        BASE.format(name="Cost") + "depends_on: [Duration]\n",
    )
    with pytest.raises(CatalogError, match=r"dependency cycle: Session/\w+ -> Session/\w+ -> Session/\w+"):
        load_catalog(folder, plugins=[])


def test_no_function_for_a_native_metric(tmp_path):
    folder = defs_dir(tmp_path, BASE.format(name="Unheard"))
    with pytest.raises(CatalogError, match="no function computes native.Unheard"):
        load_catalog(folder, plugins=[])


def test_unknown_graph_property(tmp_path):
    folder = defs_dir(tmp_path, BASE.format(name="Duration") + "requires:\n  LLMCall: [tokenz]\n")
    with pytest.raises(CatalogError, match="LLMCall has no property tokenz"):
        load_catalog(folder, plugins=[])


def test_plugin_through_the_entry_point_group(tmp_path, monkeypatch):
    """A third-party distribution on sys.path registers a provider with the
    `metrics_computation_engine.plugins` entry point group."""
    site = tmp_path / "site"
    pkg = site / "acme_metrics"
    (pkg / "defs").mkdir(parents=True)
    (pkg / "defs" / "SpanCount.yaml").write_text(
        BASE.format(name="SpanCount").replace("provider: native", "provider: acme").replace("[Session]", "[Session, AgentCall]")
    )
    (pkg / "__init__.py").write_text(textwrap.dedent('''
        from pathlib import Path
        from mce_dagster.catalog import Plugin
        from mce_dagster.core.metric import MetricValue

        def span_count(entity, inp):
            return MetricValue(value=float(len(inp.session.beneath(entity))))

        def plugin():
            return Plugin(provider="acme", metric_defs=Path(__file__).parent / "defs", functions={"SpanCount": span_count})
    '''))
    dist = site / "acme_metrics-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-metrics\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[metrics_computation_engine.plugins]\nacme = acme_metrics:plugin\n")
    monkeypatch.syspath_prepend(str(site))
    catalog = load_catalog()
    assert catalog.providers["acme"] == "plugin"
    assert DependencyKey(Scope.AGENT_CALL, "SpanCount", "acme") in catalog.metrics
    assert ("native", "Duration") in catalog.definitions  # the built-in ones are still there
    sys.modules.pop("acme_metrics", None)


def test_config_errors_name_the_problem(tmp_path):
    catalog = load_catalog(plugins=[])
    cases = {
        "metrics: {Session: [Duration]}\nextra: 1\n": "unknown key",
        "metrics: {Sesion: [Duration]}\n": "unknown key",
        "metrics: {Session: [Durration]}\n": "unknown metric 'Durration'",
        "metrics: {ToolCall: [WorkflowEfficiency]}\n": r"not defined at ToolCall \(only at Session\)",
        "metrics: {Session: [Duration]}\nengine: {batch_size: 0}\n": "engine/batch_size",
    }
    for text, message in cases.items():
        path = tmp_path / "mce_config.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_config(catalog, path)


def test_config_pulls_in_dependencies(tmp_path):
    catalog = load_catalog(plugins=[])
    path = tmp_path / "mce_config.yaml"
    path.write_text("metrics: {Session: [WorkflowEfficiency]}\n")
    config = load_config(catalog, path)
    assert [str(m.key) for m in config.enabled] == ["Session/AgentToAgentInteractions", "Session/WorkflowEfficiency"]


def test_shipped_config_loads():
    assert DEFAULT_DEFS_DIR.is_dir()
    config = load_config(load_catalog(plugins=[]))
    assert len(config.enabled) >= len(config.requested) > 10
