"""The catalog: definitions validated, errors that name what is wrong, plugins."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from mce_dagster.catalog import DEFAULT_DEFS_DIR, CatalogError, MetricRef, Plugin, UnknownMetricError, load_catalog
from mce_dagster.config import ConfigError, ConfigFile, load_config
from builders import SessionBuilder
from mce_dagster.core.evaluate import evaluate_all
from mce_dagster.core.metric import DependencyKey
from mce_dagster.core.ontology import Label, Scope
from mce_dagster.errors import ConfigurationError, MCEError
from plugin_package import install_on_path, write_package

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


@pytest.mark.parametrize(
    "depends_on, message",
    [
        ("LLMCall/Nope", "Session/Duration depends on LLMCall/Nope, which no definition provides: no metric named 'Nope'"),
        ("acme.Cost", "depends on Session/acme_Cost, which no definition provides: unknown provider 'acme'"),
        ("Sesion/Duration", r"depends_on.0: Value error, unknown scope 'Sesion'"),
        ("Co-st", "depends_on.0: Value error, 'Co-st' is not a metric name"),
    ],
)
def test_unknown_dependency(tmp_path, depends_on, message):
    folder = defs_dir(tmp_path, BASE.format(name="Duration") + f"depends_on: [{depends_on}]\n")
    with pytest.raises(CatalogError, match=message):
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


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A sys.path folder for distributions installed by the test; their modules are
    forgotten afterwards."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    before = set(sys.modules)
    yield folder
    for name in set(sys.modules) - before:
        sys.modules.pop(name, None)


def test_a_provider_is_what_an_entry_point_provides(site):
    """A third party's package that registers a provider through
    `metrics_computation_engine.plugins` provides it, beside the shipped DeepEval,
    Ragas and Opik providers, which register themselves the same way."""
    install_on_path(site, "acme", "mce_acme")
    catalog = load_catalog()
    assert catalog.providers["acme"] == "mce-acme 1.0, entry point acme = mce_acme:plugin"
    assert set(catalog.providers) == {"native", "acme", "deepeval", "ragas", "opik"}
    assert DependencyKey(Scope.AGENT_CALL, "SpanCount", "acme") in catalog.metrics
    assert ("native", "Duration") in catalog.definitions  # the built-in ones are still there
    assert [str(m.key) for m in catalog.resolve("acme.SpanCount")] == [
        "Session/acme_SpanCount", "AgentCall/acme_SpanCount"
    ]
    assert catalog.resolve("AgentCall/acme_SpanCount") == catalog.resolve("acme.SpanCount", Scope.AGENT_CALL)
    with pytest.raises(UnknownMetricError, match="no metric named 'SpanCount'; defined as acme.SpanCount"):
        catalog.resolve("SpanCount")  # without a provider, a name is the native metric's
    session = SessionBuilder("s1")
    agent = session.add(Label.AGENT_CALL, "A", 0.0, 2.0, id="a1")
    session.add(Label.TOOL_CALL, "search", 0.5, 1.0, agent)
    batches = evaluate_all(catalog.resolve("acme.SpanCount"), {"s1": session.build()}, prices=None)
    assert batches[DependencyKey(Scope.AGENT_CALL, "SpanCount", "acme")].values["s1"]["a1"].value == 1.0


def test_a_second_package_cannot_take_a_shipped_providers_name(site):
    install_on_path(site, "deepeval", "mce_deepeval")
    with pytest.raises(CatalogError, match="provider 'deepeval' is already provided"):
        load_catalog()


def test_an_underscore_in_a_provider_name(site):
    install_on_path(site, "acme_labs", "acme_labs_metrics")
    catalog = load_catalog()
    [metric] = catalog.resolve("Session/acme_labs_SpanCount")
    assert metric.key == DependencyKey(Scope.SESSION, "SpanCount", "acme_labs")


def test_a_plugin_cannot_be_native(site):
    install_on_path(site, "native", "fake_native")
    with pytest.raises(CatalogError, match=r"provider 'native' is already provided \(built in\)"):
        load_catalog()


def test_two_plugins_for_one_provider(site):
    install_on_path(site, "acme", "acme_one")
    install_on_path(site, "acme", "acme_two")
    with pytest.raises(CatalogError, match="provider 'acme' is already provided") as info:
        load_catalog()
    assert "acme-one 1.0" in str(info.value) and "acme-two 1.0" in str(info.value)


def test_a_plugin_that_does_not_import(site):
    install_on_path(site, "acme", "acme_metrics", entry_point="acme_missing:plugin")
    with pytest.raises(CatalogError, match=r"acme-metrics 1.0.*cannot be loaded: ModuleNotFoundError"):
        load_catalog()


def test_explicit_plugins_skip_discovery(site, tmp_path):
    install_on_path(site, "deepeval", "mce_deepeval")
    assert set(load_catalog(plugins=[]).providers) == {"native"}
    defs = write_package(tmp_path / "src", "ragas", "mce_ragas") / "defs"
    catalog = load_catalog(plugins=[Plugin("ragas", defs, {"SpanCount": lambda entity, inp: None})])
    assert catalog.providers == {"native": "built in", "ragas": "plugin"}


@pytest.mark.parametrize(
    "text, ref",
    [
        ("Duration", MetricRef("Duration")),
        ("native.Duration", MetricRef("Duration")),
        ("LLMCall/Duration", MetricRef("Duration", scope=Scope.LLM_CALL)),
        ("deepeval.Bias", MetricRef("Bias", "deepeval")),
        ("Session/deepeval.Bias", MetricRef("Bias", "deepeval", Scope.SESSION)),
        ("Session/deepeval_Bias", MetricRef("Bias", "deepeval", Scope.SESSION)),
        ("Session/acme-labs.Bias", MetricRef("Bias", "acme-labs", Scope.SESSION)),
        (" Cost ", MetricRef("Cost")),
    ],
)
def test_metric_names_are_parsed_in_one_place(text, ref):
    assert MetricRef.parse(text) == ref
    assert MetricRef.parse(str(ref)) == ref


def test_a_reference_matches_stored_results():
    bias = MetricRef.parse("deepeval.Bias")
    assert bias.matches(DependencyKey(Scope.LLM_CALL, "Bias", "deepeval"))
    assert not bias.matches(DependencyKey(Scope.LLM_CALL, "Bias"))  # the native Bias is another metric
    assert MetricRef.parse("Cost").matches(DependencyKey(Scope.LLM_CALL, "Cost"))
    assert not MetricRef.parse("Session/Cost").matches(DependencyKey(Scope.LLM_CALL, "Cost"))


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "is not a metric name"),
        ("Session/", "is not a metric name"),
        (".Duration", "is not a metric name"),
        ("a.b.Duration", "is not a metric name"),
        ("Duration!", "is not a metric name"),
        ("Sesion/Duration", r"unknown scope 'Sesion' in 'Sesion/Duration' \(scopes: Session, MASCall"),
    ],
)
def test_what_is_not_a_metric_name(text, message):
    with pytest.raises(UnknownMetricError, match=message):
        MetricRef.parse(text)


def test_resolve_names_what_exists():
    catalog = load_catalog(plugins=[])
    assert [m.scope for m in catalog.resolve("ToolErrorRate")] == [Scope.SESSION, Scope.AGENT_CALL]
    assert [str(m.key) for m in catalog.resolve("Session/Cost")] == ["Session/Cost"]
    cases = {
        "Durration": r"no metric named 'Durration' \(did you mean Duration\?\)",
        "Nope": r"no metric named 'Nope' \(known native metrics: AgentCallCount, ",
        "acme.Cost": r"unknown provider 'acme' in 'acme.Cost' \(providers: native\)",
        "ToolCall/WorkflowEfficiency": r"WorkflowEfficiency is not defined at ToolCall \(only at Session\)",
    }
    for text, message in cases.items():
        with pytest.raises(UnknownMetricError, match=message):
            catalog.resolve(text)
    with pytest.raises(UnknownMetricError, match="Session/Cost names scope Session, not LLMCall"):
        catalog.resolve("Session/Cost", Scope.LLM_CALL)
    assert catalog.find("Session/Cost") is catalog.find("Cost") is catalog.definitions[("native", "Cost")]
    with pytest.raises(KeyError):  # an UnknownMetricError is also a KeyError
        catalog.find("Nope")


def test_errors_are_configuration_errors():
    for error in (CatalogError, ConfigError, UnknownMetricError):
        assert issubclass(error, ConfigurationError) and issubclass(error, MCEError)
        assert error is UnknownMetricError or not issubclass(error, ValueError)
    assert str(UnknownMetricError("no metric named 'x'")) == "no metric named 'x'"


def test_config_errors_name_the_problem(tmp_path):
    catalog = load_catalog(plugins=[])
    cases = {
        "metrics: {Session: [Duration]}\nextra: 1\n": "mce_config.yaml: unknown key 'extra'",
        "metrics: {Sesion: [Duration]}\n": "metrics/Sesion: unknown key 'Sesion'",
        "metrics: {Session: [Durration]}\n": "metrics/Session: no metric named 'Durration'",
        "metrics: {ToolCall: [WorkflowEfficiency]}\n": r"metrics/ToolCall: WorkflowEfficiency is not defined at ToolCall \(only at Session\)",
        "metrics: {Session: [Duration, Cost, Duration]}\n": "metrics: Value error, Session lists Duration twice",
        "metrics: {Session: [Duration]}\nengine: {batch_size: 0}\n": "engine/batch_size: Input should be greater than or equal to 1",
        "metrics: {Session: [Duration]}\nengine: {batch_sise: 10}\n": "unknown key 'engine/batch_sise'",
        "engine: {batch_size: 10}\n": "metrics: Field required",
        "[Duration]\n": "Input should be a valid dictionary",
        "metrics: {Session: [Duration}\n": "not valid YAML",
    }
    for text, message in cases.items():
        path = tmp_path / "mce_config.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_config(catalog, path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(catalog, tmp_path / "absent.yaml")


def test_config_engine_settings(tmp_path):
    path = tmp_path / "mce_config.yaml"
    path.write_text("metrics: {Session: [Duration]}\nengine: {batch_size: 7}\n")
    config = load_config(load_catalog(plugins=[]), path)
    assert (config.engine.batch_size, config.engine.ingest_batch_size) == (7, 200)
    schema = ConfigFile.model_json_schema()  # for editors and other tools
    assert schema["additionalProperties"] is False and schema["required"] == ["metrics"]


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
