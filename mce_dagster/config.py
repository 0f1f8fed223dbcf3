"""`mce_config.yaml`: which metrics run at which scope, and engine settings.

Validated in two steps, both by this module: the file's shape by the pydantic
model `ConfigFile` (`ConfigFile.model_json_schema()` gives it as a JSON schema),
then each metric name against the catalog. An unknown key, scope or metric name
is a `ConfigError` that names it and the file. Which file (MCE_CONFIG) is the
settings' `config_path`, given by whoever loads the definitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .bundled import shipped_path
from .catalog import Catalog, CatalogMetric, validation_message
from .core.ontology import Scope
from .errors import ConfigurationError, UnknownMetricError

DEFAULT_CONFIG_PATH = shipped_path("mce_config.yaml")


class ConfigError(ConfigurationError):
    """`mce_config.yaml` cannot be read, or names what does not exist."""


class EngineSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Sessions evaluated per run (sensor ticks and `mce compute --all`).
    batch_size: int = Field(500, ge=1, le=100_000)
    ingest_batch_size: int = Field(200, ge=1, le=100_000)
    # Runs `mce compute` keeps going at once, each in a process of its own (a core
    # each: a run uses about one core, the graph server a fraction of another).
    workers: int = Field(1, ge=1, le=64)
    # What one request of the REST API may ask for: sessions, and runs waiting in the
    # instance's queue (its own and the ones already there) before it is refused.
    max_sessions_per_request: int = Field(1_000, ge=1, le=10_000)
    max_queued_runs: int = Field(100, ge=1, le=100_000)


class ProviderSection(BaseModel):
    """What the provider metrics (DeepEval, Ragas, Opik) read, by app name, with
    `default` for any other app: the reference topics of `ragas.TopicAdherence`, the
    tools `deepeval.ToolCorrectness` and `ragas.ToolCallAccuracy` expect."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    topics: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    expected_tools: dict[str, tuple[str, ...]] = Field(default_factory=dict)


class ConfigFile(BaseModel):
    """The file as written, before its metric names are looked up."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metrics: dict[Scope, tuple[str, ...]]
    engine: EngineSettings = EngineSettings()
    providers: ProviderSection = ProviderSection()

    @field_validator("metrics")
    @classmethod
    def _listed_once(cls, metrics: dict[Scope, tuple[str, ...]]) -> dict[Scope, tuple[str, ...]]:
        for scope, names in metrics.items():
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise ValueError(f"{scope.value} lists {', '.join(twice)} twice")
        return metrics


@dataclass(frozen=True)
class MCEConfig:
    path: Path
    enabled: tuple[CatalogMetric, ...]  # as configured, plus their dependencies
    requested: tuple[CatalogMetric, ...]  # as configured
    engine: EngineSettings
    providers: ProviderSection = ProviderSection()


def read_config_file(path: Path) -> ConfigFile:
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    try:
        return ConfigFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(validation_message(str(path), exc, sep="/", member="key")) from None


def load_config(catalog: Catalog, path: Path | None = None) -> MCEConfig:
    """The file at `path` (the settings' MCE_CONFIG), else the shipped one."""
    path = Path(path or DEFAULT_CONFIG_PATH)
    config = read_config_file(path)
    requested = []
    for scope, names in config.metrics.items():
        for name in names:
            try:
                requested.extend(catalog.resolve(name, scope))
            except UnknownMetricError as exc:
                raise ConfigError(f"{path}: metrics/{scope.value}: {exc}") from None
    enabled = catalog.closure(m.key for m in requested)
    return MCEConfig(
        path=path, enabled=tuple(enabled), requested=tuple(requested), engine=config.engine, providers=config.providers
    )
