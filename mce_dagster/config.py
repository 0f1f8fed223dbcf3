"""`mce_config.yaml`: which metrics run at which scope, and engine settings.

Validated against a JSON schema when loaded, then against the catalog: an
unknown key, scope or metric name is an error that names it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from .catalog import Catalog, CatalogMetric, parse_dependency
from .core.ontology import Scope

DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent.parent / "mce_config.yaml"

CONFIG_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["metrics"],
    "properties": {
        "metrics": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                scope.value: {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True}
                for scope in Scope
            },
        },
        "engine": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "batch_size": {"type": "integer", "minimum": 1, "maximum": 100000},
                "ingest_batch_size": {"type": "integer", "minimum": 1, "maximum": 100000},
            },
        },
    },
}


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class EngineSettings:
    batch_size: int = 500
    ingest_batch_size: int = 200


@dataclass(frozen=True)
class MCEConfig:
    path: Path
    enabled: tuple[CatalogMetric, ...]  # as configured, plus their dependencies
    requested: tuple[CatalogMetric, ...]  # as configured
    engine: EngineSettings


def config_path() -> Path:
    return Path(os.environ.get("MCE_CONFIG", DEFAULT_CONFIG_PATH))


def load_config(catalog: Catalog, path: Path | None = None) -> MCEConfig:
    path = Path(path or config_path())
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    try:
        jsonschema.validate(raw, CONFIG_SCHEMA)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        message = exc.message
        if exc.validator == "additionalProperties":
            message = message.replace("Additional properties are not allowed", "unknown key")
        raise ConfigError(f"{path}: {where}: {message}") from None
    requested = []
    for scope_name, names in raw["metrics"].items():
        scope = Scope(scope_name)
        for name in names:
            key = parse_dependency(name.replace(".", "_", 1), scope)
            if key not in catalog.metrics:
                defined = [d for (p, n), d in catalog.definitions.items() if n == key.name and p == key.provider]
                if defined:
                    scopes = ", ".join(s.value for s in defined[0].scopes)
                    raise ConfigError(f"{path}: metrics/{scope_name}: {name} is not defined at {scope_name} (only at {scopes})")
                raise ConfigError(f"{path}: metrics/{scope_name}: unknown metric {name!r}")
            requested.append(catalog.metrics[key])
    enabled = catalog.closure(m.key for m in requested)
    engine = EngineSettings(**(raw.get("engine") or {}))
    return MCEConfig(path=path, enabled=tuple(enabled), requested=tuple(requested), engine=engine)
