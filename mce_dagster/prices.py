"""Loads LiteLLM's model price table (`model_prices_and_context_window.json`).

The copy bundled with the installed `litellm` package is read as a file, without
importing LiteLLM (which takes seconds and reaches for the network unless
LITELLM_LOCAL_MODEL_COST_MAP is set). MODEL_PRICES_PATH points at another copy.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path

from .core.pricing import PriceTable
from .settings import Settings

_BUNDLED_NAME = "model_prices_and_context_window_backup.json"


def bundled_table_path() -> Path:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("litellm is not installed; its price table prices the Cost metric")
    return Path(list(spec.submodule_search_locations)[0]) / _BUNDLED_NAME


def table_path() -> Path:
    return Settings.from_env().prices_path or bundled_table_path()


@functools.lru_cache(maxsize=4)
def _load(path: str) -> PriceTable:
    with open(path, encoding="utf-8") as f:
        return PriceTable(json.load(f))


def load_price_table() -> PriceTable:
    return _load(str(table_path()))
