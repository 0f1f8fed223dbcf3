"""The price table (issue 11, item 5): the committed trimmed copy, refreshed from a
local HTTP server at the first lookup and every TTL, kept on a failed refresh and
retried an hour later, refresh off, and `mce prices update`."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mce_dagster import prices
from mce_dagster.settings import PriceSettings

TABLE = {
    "gpt-4o": {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6, "mode": "chat", "supports_vision": True},
    "judge-model": {"input_cost_per_token": 3e-7, "output_cost_per_token": 4e-7, "mode": "chat"},
    "sample_spec": {"max_tokens": "not a model"},
}


@pytest.fixture
def table_server():
    state = {"status": 200, "hits": 0}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            state["hits"] += 1
            body = json.dumps(TABLE).encode()
            self.send_response(state["status"])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state["url"] = f"http://127.0.0.1:{server.server_address[1]}/prices.json"
    yield state
    server.shutdown()
    server.server_close()


def test_the_committed_copy_is_trimmed_and_prices_the_fallback():
    data = json.loads(prices.COMMITTED_PATH.read_text())
    assert "gpt-4o" in data and all("input_cost_per_token" in e for e in data.values())
    assert all(set(e) <= set(prices._FIELDS) for e in data.values())


def test_refreshed_at_the_first_lookup_then_every_ttl(table_server, monkeypatch):
    source = prices.RefreshingPrices(prices.COMMITTED_PATH, PriceSettings(True, table_server["url"], 1000.0), True)
    assert source.current().price("judge-model").input_per_token == 3e-7
    assert table_server["hits"] == 1 and source.source == table_server["url"]
    source.current()
    assert table_server["hits"] == 1  # within the TTL
    monkeypatch.setattr(prices.time, "time", lambda: source._next_refresh + 1)
    source.current()
    assert table_server["hits"] == 2


def test_a_failed_refresh_keeps_the_table_and_retries_an_hour_later(table_server, monkeypatch):
    table_server["status"] = 500
    source = prices.RefreshingPrices(prices.COMMITTED_PATH, PriceSettings(True, table_server["url"], 60.0), True)
    now = prices.time.time()
    table = source.current()
    assert table.price("gpt-4o-mini").priced_as is None  # the committed copy
    assert source.last_error and source._next_refresh >= now + 3599
    unreachable = prices.RefreshingPrices(prices.COMMITTED_PATH, PriceSettings(True, "http://127.0.0.1:9/none", 60.0), True)
    assert unreachable.current().price("gpt-4o").input_per_token > 0 and unreachable.last_error


def test_refresh_off_never_fetches(table_server):
    source = prices.RefreshingPrices(prices.COMMITTED_PATH, PriceSettings(False, table_server["url"], 60.0), True)
    source.current()
    assert table_server["hits"] == 0


def test_a_missing_model_is_priced_as_gpt_4o_and_says_so(table_server):
    source = prices.RefreshingPrices(prices.COMMITTED_PATH, PriceSettings(True, table_server["url"], 60.0), True)
    price = source.current().price("no-such-model")
    assert price.priced_as == "gpt-4o" and price.input_per_token == 1e-6


def test_update_rewrites_the_committed_copy(table_server, tmp_path):
    target = tmp_path / "model_prices.json"
    assert prices.update_committed(url=table_server["url"], target=target) == 2
    written = json.loads(target.read_text())
    assert set(written) == {"gpt-4o", "judge-model"} and "supports_vision" not in written["gpt-4o"]
