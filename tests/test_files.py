"""Files written whole, by any number of writers at once."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mce_dagster.files import write_text_atomically
from mce_dagster.instance.local import local_instance_yaml, write_local_config

WRITERS = 8


def at_once(fn, n: int = WRITERS) -> list:
    """fn() called from n threads released together; every result or exception."""
    start = threading.Barrier(n)

    def call():
        start.wait()
        return fn()

    with ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(call) for _ in range(n)]
    return [f.exception() or f.result() for f in futures]


def test_threads_of_one_process_make_one_local_instance_together(tmp_path):
    # Two instances opened on one fresh DAGSTER_HOME by two threads (a run and a test
    # watching it) both write dagster.yaml; neither may fail on the other's temporary file.
    for attempt in range(30):
        home = tmp_path / f"home{attempt}"
        outcomes = at_once(lambda: write_local_config(home))
        assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
        assert (home / "dagster.yaml").read_text() == local_instance_yaml(home)
        assert sorted(p.name for p in home.iterdir()) == ["dagster.yaml"]  # no partial left behind


def test_a_reader_sees_one_whole_version_or_the_other(tmp_path):
    target = tmp_path / "answer.json"
    versions = {f"{i}:" + str(i) * 50_000 for i in range(WRITERS)}
    texts = iter(sorted(versions))
    lock = threading.Lock()

    def write():
        with lock:
            text = next(texts)
        write_text_atomically(target, text)

    seen = []
    stop = threading.Event()

    def read():
        while not stop.is_set():
            if target.exists():
                seen.append(target.read_text())

    reader = threading.Thread(target=read)
    reader.start()
    try:
        outcomes = at_once(write)
    finally:
        stop.set()
        reader.join()
    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    assert target.read_text() in versions
    assert set(seen) <= versions
    assert [p.name for p in tmp_path.iterdir()] == ["answer.json"]


def test_a_failed_write_leaves_the_old_file_and_no_partial(tmp_path):
    target = tmp_path / "kept.txt"
    target.write_text("old")

    try:
        write_text_atomically(target, "new \udc80")  # a lone surrogate: the file opens, the write fails
    except UnicodeEncodeError:
        pass
    else:
        raise AssertionError("the write should have failed")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["kept.txt"]
