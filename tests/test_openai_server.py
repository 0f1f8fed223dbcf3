"""The local OpenAI-compatible server's fixed latency (tests/openai_server.py): every
reply waits for it, on top of its own delay, and concurrent requests wait side by
side, as a model's time to answer does."""

from __future__ import annotations

import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from openai_server import Completion, FakeOpenAI


def ask(base_url: str) -> dict:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = urllib.request.Request(f"{base_url}/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def test_every_reply_waits_for_the_latency_and_its_own_delay():
    with FakeOpenAI(lambda req: Completion("ok\nScore: 3", delay=0.2), latency=0.3) as server:
        elapsed = timed(lambda: ask(server.base_url))
        assert ask(server.base_url)["choices"][0]["message"]["content"] == "ok\nScore: 3"
    assert elapsed >= 0.5


def test_without_latency_a_reply_does_not_wait():
    with FakeOpenAI() as server:
        assert timed(lambda: ask(server.base_url)) < 0.25


def test_concurrent_requests_wait_side_by_side():
    with FakeOpenAI(latency=0.4) as server:
        sequential = timed(lambda: [ask(server.base_url) for _ in range(4)])
        with ThreadPoolExecutor(4) as pool:
            concurrent = timed(lambda: list(pool.map(lambda _: ask(server.base_url), range(4))))
    assert sequential >= 1.6
    assert concurrent < sequential / 2


def test_many_clients_connecting_at_once_are_all_accepted():
    # A refused connection is retried a second later: the whole batch would take over 1.3 s.
    with FakeOpenAI(latency=0.3) as server:
        with ThreadPoolExecutor(24) as pool:
            elapsed = timed(lambda: list(pool.map(lambda _: ask(server.base_url), range(24))))
    assert elapsed < 1.2
