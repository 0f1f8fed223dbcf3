"""One evaluation path: `mce compute`, the REST API and the sensors select the same
assets for the same request, and the REST API's runs go through the instance's queue.

Then the API as an attacker uses it: a request for 10,000 sessions, and requests for
scattered sessions (each its own run), against a running `mce serve --api` over the
local instance, whose daemon launches at most `max_concurrent_runs` at once. And a
deployment whose daemon is down: the queue fills, and the next request is refused.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import httpx
import pytest
import yaml

from mce_dagster.definitions import runtime
from mce_dagster.evaluation import RANGE_START, SESSIONS_TAG, plan

MCE = str(Path(sys.executable).with_name("mce"))
REPO = Path(__file__).resolve().parent.parent
MAX_SESSIONS = 50
MAX_QUEUED = 8


def _config_file(path: Path, **engine) -> Path:
    """The shipped mce_config.yaml with other engine caps."""
    data = yaml.safe_load((REPO / "mce_config.yaml").read_text())
    data["engine"].update(engine)
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def home(mce_home, tmp_path_factory):
    """14 sessions in the module's graph, the caps lowered, DAGSTER_HOME under MCE_HOME."""
    from mce_dagster import service
    from mce_dagster.synthetic import write_export

    previous = {k: os.environ.get(k) for k in ("DAGSTER_HOME", "MCE_CONFIG")}
    os.environ["DAGSTER_HOME"] = str(mce_home / "dagster")
    os.environ["MCE_CONFIG"] = str(_config_file(tmp_path_factory.mktemp("config") / "mce_config.yaml",
                                                max_sessions_per_request=MAX_SESSIONS, max_queued_runs=MAX_QUEUED))
    runtime.cache_clear()
    export = write_export(mce_home / "synthetic.json", 14, seed=23)
    service.ingest([export.path])
    yield {"home": mce_home, "sessions": service.sessions_to_evaluate([], True)}
    runtime.cache_clear()
    for k, v in previous.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def instance(home):
    from mce_dagster.runner import dagster_instance

    return dagster_instance()


@pytest.fixture(scope="module")
def api(home, instance):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen([MCE, "serve", "--api", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        assert process.poll() is None, process.stderr.read().decode()[-3000:]
        try:
            httpx.get(f"{url}/healthz", timeout=1)
            break
        except httpx.TransportError:
            assert time.monotonic() < deadline, "the API did not start"
            time.sleep(0.2)
    yield {"url": url, "process": process}
    process.terminate()
    process.wait(60)


def _daemon_log(home) -> str:
    log = home["home"] / "logs" / "dagster-daemon.log"
    return log.read_text(errors="replace")[-3000:] if log.exists() else "(no daemon log)"


def _selection(instance: dg.DagsterInstance, run_id: str) -> set[dg.AssetKey]:
    run = instance.get_run_by_id(run_id)
    assert run is not None and run.asset_selection, run
    return set(run.asset_selection)


def _cli_run(instance: dg.DagsterInstance, *args: str) -> dg.DagsterRun:
    from typer.testing import CliRunner

    from mce_dagster.cli import app

    result = CliRunner().invoke(app, ["compute", *args])
    assert result.exit_code == 0, result.output
    (run,) = instance.get_runs(filters=dg.RunsFilter(tags={RANGE_START: args[0]}), limit=1)
    return run


def test_the_cli_the_api_and_a_sensor_select_the_same_assets(home, instance, api):
    from mce_dagster.definitions import defs
    from mce_dagster.defs.sensors import POLL_SENSOR

    first, second, third, fourth = home["sessions"][:4]
    _, config = runtime()
    expected = set(plan(config).asset_keys)
    judged = {k for k in (set(plan(config, judge_configured=True).asset_keys) - expected)}
    assert judged, "without a judge the default evaluation leaves judged metrics out"

    cli = set(_cli_run(instance, first).asset_selection)
    response = httpx.post(f"{api['url']}/compute_metrics", json={"session_ids": [second]}, timeout=120)
    assert response.status_code == 202, response.text + _daemon_log(home)
    (run_id,) = response.json()["run_ids"]
    rest = _selection(instance, run_id)

    sensor = defs.get_sensor_def(POLL_SENSOR)
    context = dg.build_sensor_context(instance=instance, definitions=defs, resources={"knowledge_graph": defs.resources["knowledge_graph"]})
    (request,) = sensor(context).run_requests
    by_sensor = set(request.asset_graph_subset.asset_keys)

    assert cli == rest == by_sensor == expected
    assert not (cli | rest | by_sensor) & judged

    # Metrics named: the same closure, whichever interface is asked.
    cli = set(_cli_run(instance, third, "--metrics", "ToolErrorRate,Session/AvgLLMCallDuration").asset_selection)
    response = httpx.post(
        f"{api['url']}/compute_metrics", json={"session_ids": [fourth], "metrics": ["ToolErrorRate", "Session/AvgLLMCallDuration"]}, timeout=120
    )
    assert response.status_code == 202, response.text
    (run_id,) = response.json()["run_ids"]
    assert _selection(instance, run_id) == cli
    assert dg.AssetKey(["LLMCall", "Duration"]) in cli  # what AvgLLMCallDuration reads
    assert dg.AssetKey(["Session", "Cost"]) not in cli


def _wait_until_finished(instance, run_ids, home, timeout_s=600) -> int:
    """Poll the instance until the runs are finished; the most seen STARTED at once."""
    deadline = time.monotonic() + timeout_s
    most = 0
    while run_ids:
        records = instance.get_run_records(filters=dg.RunsFilter(run_ids=list(run_ids)))
        most = max(most, sum(r.dagster_run.status == dg.DagsterRunStatus.STARTED for r in records))
        if all(r.dagster_run.is_finished for r in records):
            return most
        assert time.monotonic() < deadline, [r.dagster_run.status for r in records] + [_daemon_log(home)]
        time.sleep(0.25)
    return most


def _most_overlapping(records) -> int:
    """The most runs in progress at one moment, from their start and end times."""
    edges = sorted([(r.start_time, 1) for r in records] + [(r.end_time, -1) for r in records], key=lambda e: (e[0], e[1]))
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def _descendants(pid: int) -> dict[int, str]:
    """pid -> state letter of every live process below `pid`."""
    parents: dict[int, list[tuple[int, str]]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        parents.setdefault(int(ppid), []).append((int(entry.name), state))
    out, stack = {}, [pid]
    while stack:
        for child, state in parents.get(stack.pop(), []):
            out[child] = state
            stack.append(child)
    return out


def test_ten_thousand_scattered_sessions_never_run_more_than_the_queue_allows(home, instance, api):
    from mce_dagster.defs.partitions import SESSIONS
    from mce_dagster.instance.submission import max_concurrent_runs

    url = api["url"]
    runs_before = instance.get_runs_count()

    # 10,000 sessions in one request: refused before anything is looked up or created.
    ids = [*home["sessions"], *(f"scattered-{i}" for i in range(10_000 - len(home["sessions"])))]
    response = httpx.post(f"{url}/compute_metrics", json={"session_ids": ids}, timeout=120)
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["field"] == "session_ids"
    assert f"at most {MAX_SESSIONS}" in problem["error"] and "engine.max_sessions_per_request" in problem["error"]
    assert len(response.content) < 1000  # the ids are not echoed
    assert instance.get_runs_count() == runs_before

    # Sessions that are not adjacent partitions: each is a run of its own.
    rest = [s for s in home["sessions"] if not instance.has_dynamic_partition(SESSIONS, s)]
    assert len(rest) > MAX_QUEUED
    interleaved = [k for i, s in enumerate(rest) for k in (s, f"between-{i}")]
    instance.add_dynamic_partitions(SESSIONS, interleaved)
    response = httpx.post(f"{url}/compute_metrics", json={"session_ids": rest}, timeout=120)
    assert response.status_code == 422, response.text
    assert f"make {len(rest)} runs" in response.json()["error"] and f"at most {MAX_QUEUED} waiting runs" in response.json()["error"]
    assert instance.get_runs_count() == runs_before

    # As many as the queue takes: queued in bounded runs, at most max_concurrent_runs at once.
    limit = max_concurrent_runs(instance)
    assert 0 < limit < MAX_QUEUED
    earlier = [r.dagster_run.run_id for r in instance.get_run_records() if not r.dagster_run.is_finished]
    _wait_until_finished(instance, earlier, home)  # the first test's runs
    response = httpx.post(f"{url}/compute_metrics", json={"session_ids": rest[:MAX_QUEUED]}, timeout=120)
    assert response.status_code == 202, response.text + _daemon_log(home)
    run_ids = response.json()["run_ids"]
    assert len(run_ids) == MAX_QUEUED
    for run_id in run_ids:
        run = instance.get_run_by_id(run_id)
        assert run.tags[SESSIONS_TAG] == "1" and run.remote_job_origin is not None
    seen_at_once = _wait_until_finished(instance, run_ids, home)
    records = instance.get_run_records(filters=dg.RunsFilter(run_ids=run_ids))
    assert {r.dagster_run.status for r in records} == {dg.DagsterRunStatus.SUCCESS}, _daemon_log(home)
    assert seen_at_once <= limit and _most_overlapping(records) <= limit, (seen_at_once, _most_overlapping(records))
    for session in rest[:MAX_QUEUED]:
        assert httpx.get(f"{url}/sessions/{session}/metrics", timeout=30).json(), session

    queue = httpx.get(f"{url}/status", timeout=30).json()["instance"]["queue"]
    assert queue == {"queued": True, "max_concurrent_runs": limit, "waiting": 0, "daemon_alive": True}, queue

    # No process left behind: the runs' workers are gone, none is a zombie.
    time.sleep(2)
    below = _descendants(api["process"].pid)
    assert "Z" not in below.values(), below
    assert len(below) <= 4, below  # the API's code server, the daemon and its code server


@pytest.fixture
def daemonless(tmp_path, monkeypatch, home):
    """A deployment's instance (its own dagster.yaml, not `mce`'s) whose daemon is
    down: what is submitted stays in the queue."""
    from mce_dagster import queued
    from mce_dagster.instance.local import local_instance_yaml, prepare_local_instance

    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    text = local_instance_yaml(dagster_home)
    (dagster_home / "dagster.yaml").write_text(text.split("\n", 1)[1])  # without mce's first line: the user's file
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    monkeypatch.setenv("MCE_CONFIG", str(_config_file(tmp_path / "mce_config.yaml", max_queued_runs=4)))
    runtime.cache_clear()
    prepare_local_instance(dagster_home)
    queued._close()
    yield dg.DagsterInstance.from_config(str(dagster_home))
    queued._close()
    runtime.cache_clear()


def test_a_full_queue_refuses_the_next_request_with_429(daemonless, home):
    from mce_dagster import service
    from mce_dagster.defs.partitions import SESSIONS
    from mce_dagster.errors import QueueFullError, RequestTooLargeError

    instance = daemonless
    sessions = home["sessions"]
    instance.add_dynamic_partitions(SESSIONS, [k for i, s in enumerate(sessions) for k in (s, f"gap-{i}")])
    first = service.submit_compute(sessions[:3])
    assert len(first) == 3
    assert {instance.get_run_by_id(r).status for r in first} == {dg.DagsterRunStatus.QUEUED}
    with pytest.raises(QueueFullError, match=r"3 runs wait and this request needs 2, at most 4 may wait"):
        service.submit_compute(sessions[3:5])
    with pytest.raises(RequestTooLargeError, match=r"make 5 runs"):
        service.submit_compute(sessions[5:10])
    assert instance.get_runs_count() == 3
    assert len(service.submit_compute(sessions[3:4])) == 1  # one more fits


def test_a_requests_runs_share_the_judge_budget(daemonless, home, monkeypatch):
    """The judge budget is the request's: its runs' judged assets get shares of it
    in proportion to their sessions, so together they cannot spend more."""
    from mce_dagster import service
    from mce_dagster.defs.partitions import SESSIONS

    monkeypatch.setenv("MCE_JUDGE_BUDGET_USD", "0.3")
    instance = daemonless
    sessions = home["sessions"]
    # Two adjacent sessions, then one apart: runs of 2 and 1 sessions.
    instance.add_dynamic_partitions(SESSIONS, [sessions[0], sessions[1], "gap", sessions[2]])
    run_ids = service.submit_compute(sessions[:3], ["Session/AnswerRelevancy"])
    shares = {}
    for run_id in run_ids:
        run = instance.get_run_by_id(run_id)
        (config,) = run.run_config["ops"].values()
        shares[run.tags[SESSIONS_TAG]] = config["config"]["budget_usd"]
    assert shares == {"2": pytest.approx(0.2), "1": pytest.approx(0.1)}


def test_sessions_are_split_into_runs_of_adjacent_partitions():
    from mce_dagster.evaluation import budget_shares, session_runs

    order = ["a", "b", "c", "x", "d", "e", "f"]
    assert session_runs(["f", "a", "b", "d", "e", "c"], order, 2) == [["a", "b"], ["c"], ["d", "e"], ["f"]]
    assert budget_shares([["a", "b"], ["c"]], None) == [None, None]
    assert budget_shares([["a", "b"], ["c"], ["d"]], 1.0) == [0.5, 0.25, 0.25]
