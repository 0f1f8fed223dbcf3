"""Model prices from a LiteLLM-format price table (a dict), with no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .metric import ModelPrice

FALLBACK_MODEL = "gpt-4o"


class PriceTable:
    """Looks a model up by its name, then without a provider prefix, then with the
    provider's prefix; a model still missing is priced as `gpt-4o` and says so."""

    def __init__(self, entries: Mapping[str, Mapping[str, Any]], fallback: str = FALLBACK_MODEL):
        self._entries = {
            name: entry
            for name, entry in entries.items()
            if isinstance(entry, Mapping) and "input_cost_per_token" in entry
        }
        if fallback not in self._entries:
            raise ValueError(f"the price table has no entry for the fallback model {fallback!r}")
        self._fallback = fallback
        self._cache: dict[tuple[str | None, str | None], ModelPrice] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def _candidates(self, model: str, provider: str | None) -> list[str]:
        names = [model, model.lower()]
        if "/" in model:
            names.append(model.split("/", 1)[1])
        if provider:
            names.append(f"{provider.lower()}/{model}")
        return names

    def price(self, model: str | None, provider: str | None = None) -> ModelPrice:
        key = (model, provider)
        if key not in self._cache:
            self._cache[key] = self._lookup(model, provider)
        return self._cache[key]

    def _lookup(self, model: str | None, provider: str | None) -> ModelPrice:
        if model:
            for name in self._candidates(model, provider):
                if name in self._entries:
                    return self._make(name, self._entries[name], None)
        entry = self._entries[self._fallback]
        return self._make(model or "(unknown)", entry, self._fallback)

    @staticmethod
    def _make(model: str, entry: Mapping[str, Any], priced_as: str | None) -> ModelPrice:
        cache = entry.get("cache_read_input_token_cost")
        return ModelPrice(
            model=model,
            input_per_token=float(entry.get("input_cost_per_token") or 0.0),
            output_per_token=float(entry.get("output_cost_per_token") or 0.0),
            cache_read_per_token=None if cache is None else float(cache),
            priced_as=priced_as,
        )
