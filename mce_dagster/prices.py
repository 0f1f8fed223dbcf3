"""The model price table (LiteLLM's `model_prices_and_context_window.json`).

The package carries a committed, trimmed copy (`data/model_prices.json`: the
entries that have token prices, the fields the engine reads). At run time the
table is refreshed from `MODEL_PRICES_URL` at the first lookup and every
`MODEL_PRICES_TTL_SECONDS`; a failed refresh keeps the table already loaded and
is retried an hour later; `MODEL_PRICES_REFRESH=false` turns refresh off
(clusters with no internet). `MODEL_PRICES_PATH` points at another table (never
refreshed). `mce prices update` rewrites the committed copy. The judge's calls
and the sessions' own LLM calls (the `Cost` metric) are priced by the same table.
Inside Dagster the `prices` resource carries these settings; `load_price_table()`
without them is the process's table, for the other interfaces.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from .core.pricing import FALLBACK_MODEL, PriceTable
from .settings import PriceSettings, Settings

log = logging.getLogger(__name__)

_BUNDLED_NAME = "model_prices_and_context_window_backup.json"
COMMITTED_PATH = Path(__file__).resolve().parent / "data" / "model_prices.json"
RETRY_AFTER_FAILURE = 3600.0
FETCH_TIMEOUT = 5.0
_FIELDS = ("input_cost_per_token", "output_cost_per_token", "cache_read_input_token_cost", "litellm_provider", "mode")


def bundled_table_path() -> Path:
    """LiteLLM's own bundled copy, in the installed package (read as a file)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("litellm is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / _BUNDLED_NAME


def trim(entries: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The entries with token prices, and only the fields the engine reads."""
    out = {}
    for name, entry in entries.items():
        if isinstance(entry, dict) and "input_cost_per_token" in entry:
            out[name] = {f: entry[f] for f in _FIELDS if f in entry}
    if FALLBACK_MODEL not in out:
        raise ValueError(f"the price table has no {FALLBACK_MODEL!r}, the fallback of every missing model")
    return out


def dumps(entries: dict[str, dict[str, Any]]) -> str:
    """One model a line, sorted: a refresh shows as a readable diff."""
    lines = [f"{json.dumps(name)}: {json.dumps(entry, sort_keys=True)}" for name, entry in sorted(trim(entries).items())]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def fetch(url: str, timeout: float = FETCH_TIMEOUT) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (a configured URL)
        data = json.loads(response.read().decode("utf-8"))
    if not isinstance(data, dict):
        raise ValueError("the price table is not a JSON object")
    return trim(data)


class RefreshingPrices:
    """The table in use: loaded from a file, refreshed from a URL on schedule."""

    def __init__(self, path: Path, settings: PriceSettings, refreshable: bool):
        self.path = path
        self.settings = settings
        self.refreshable = refreshable and settings.refresh
        self._table = PriceTable(json.loads(path.read_text(encoding="utf-8")))
        self._next_refresh = 0.0  # the first lookup refreshes
        self._lock = threading.Lock()
        self.source = str(path)
        self.last_error: str | None = None

    def current(self) -> PriceTable:
        if self.refreshable and time.time() >= self._next_refresh:
            with self._lock:
                if time.time() >= self._next_refresh:
                    self._refresh()
        return self._table

    def _refresh(self) -> None:
        try:
            self._table = PriceTable(fetch(self.settings.url))
            self.source = self.settings.url
            self.last_error = None
            self._next_refresh = time.time() + self.settings.ttl_seconds
        except Exception as exc:  # offline, a bad URL, a bad body: keep what is loaded
            self.last_error = f"{type(exc).__name__}: {exc}"
            self._next_refresh = time.time() + RETRY_AFTER_FAILURE
            log.warning("price table not refreshed from %s (%s); keeping %s, retrying in an hour", self.settings.url, self.last_error, self.source)


_CURRENT: dict[PriceSettings, RefreshingPrices] = {}
_LOCK = threading.Lock()


def price_source(settings: PriceSettings | None = None) -> RefreshingPrices:
    """The table of these settings (else the process's), one per process."""
    settings = settings or Settings.from_env().prices
    path = settings.path or COMMITTED_PATH
    with _LOCK:
        if settings not in _CURRENT:
            _CURRENT[settings] = RefreshingPrices(path, settings, refreshable=settings.path is None)
        return _CURRENT[settings]


def load_price_table(settings: PriceSettings | None = None) -> PriceTable:
    return price_source(settings).current()


def update_committed(url: str | None = None, source: Path | None = None, target: Path = COMMITTED_PATH) -> int:
    """Rewrite the committed copy from the URL (or a file); returns the entry count."""
    if source is not None:
        entries = trim(json.loads(Path(source).read_text(encoding="utf-8")))
    elif url:
        entries = fetch(url, timeout=60)
    else:
        raise ValueError("update_committed: give the URL or the file to read the table from")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(dumps(entries), encoding="utf-8")
    return len(entries)
