"""The project's SQLite event log (mce_dagster.instance.sqlite) against Dagster's stock
one: the same runs give the same partition status, run history and lineage, read
through the instance and through the webserver's GraphQL; a batch that fails halfway
is written once; the private parts of dagster it rests on are still there."""

from __future__ import annotations

import inspect
import json
import os
import sqlite3
import sys
import time
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as db
from dagster._core.events import ASSET_EVENTS, BATCH_WRITABLE_EVENTS, DagsterEventType
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.storage.event_log.schema import DynamicPartitionsTable
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME, SqliteEventLogStorage
from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage
from dagster._core.storage.partition_status_cache import get_and_update_asset_status_cache_value
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster_graphql.test.utils import execute_dagster_graphql

from conftest import REPO
from mce_dagster.instance.local import LOCAL_INSTANCE_YAML, MARKER, prepare_local_instance, write_local_config
from mce_dagster.instance.sqlite import PooledSqliteEventLogStorage
from mce_dagster.evaluation import RANGE_END, RANGE_START

sys.path.insert(0, str(REPO / "bench"))
import bookkeeping_assets as trivial  # noqa: E402

# Small, so that the planned events of a run span several batches.
BATCH = "16"
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


@pytest.fixture(scope="module", autouse=True)
def event_batches():
    previous = os.environ.get("DAGSTER_EVENT_BATCH_SIZE")
    os.environ["DAGSTER_EVENT_BATCH_SIZE"] = BATCH
    yield
    if previous is None:
        os.environ.pop("DAGSTER_EVENT_BATCH_SIZE", None)
    else:
        os.environ["DAGSTER_EVENT_BATCH_SIZE"] = previous


def open_instance(home: Path, kind: str) -> dg.DagsterInstance:
    if kind == "project":
        write_local_config(home)
    else:  # Dagster's defaults: SQLite in the same layout
        home.mkdir(parents=True, exist_ok=True)
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    instance = dg.DagsterInstance.from_config(str(home))
    expected = PooledSqliteEventLogStorage if kind == "project" else SqliteEventLogStorage
    assert type(instance.event_log_storage) is expected
    return instance


def span(keys: list[str]) -> dict[str, str]:
    return {RANGE_START: keys[0], RANGE_END: keys[-1]}


# -- what an instance answers -----------------------------------------------------------


def instance_answers(instance: dg.DagsterInstance, defs: dg.Definitions) -> dict:
    """Partition status, materializations, lineage and runs as the instance's APIs give
    them, with run ids replaced by the run's position (the two instances' ids differ)."""
    runs = list(reversed(instance.get_runs()))
    position = {r.run_id: i for i, r in enumerate(runs)}
    graph = defs.resolve_asset_graph()
    keys = instance.get_dynamic_partitions("sessions")
    assets = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        records = instance.fetch_materializations(key, limit=10_000).records
        latest = instance.get_latest_materialization_event(key)
        entry = next(iter(instance.get_asset_records([key])), None)
        answer = {
            "parents": sorted(k.to_user_string() for k in node.parent_keys),
            "materializations": sorted((r.partition_key or "", position[r.run_id]) for r in records),
            "latest": (latest.dagster_event.partition, position[latest.run_id]) if latest else None,
            # The asset's row, which a batch updates once for all its events.
            "row": (
                position.get(entry.asset_entry.last_run_id),
                entry.asset_entry.last_materialization_record.event_log_entry.dagster_event.partition
                if entry.asset_entry.last_materialization_record else None,
            ) if entry else None,
            "metadata": sorted(
                (r.partition_key or "", json.dumps({k: str(v.value) for k, v in r.asset_materialization.metadata.items()}, sort_keys=True))
                for r in records
            ),
        }
        part = node.partitions_def
        if part is not None:
            answer["materialized"] = sorted(instance.get_materialized_partitions(key))
            answer["status"] = {p: s.value if s else None for p, s in (instance.get_status_by_partition(key, keys, part) or {}).items()}
            cached = get_and_update_asset_status_cache_value(instance, key, part)
            answer["cache"] = cached and {  # None for an asset no run touched
                "materialized": sorted(cached.deserialize_materialized_partition_subsets(part).get_partition_keys()),
                "failed": sorted(cached.deserialize_failed_partition_subsets(part).get_partition_keys()),
                "in_progress": sorted(cached.deserialize_in_progress_partition_subsets(part).get_partition_keys()),
            }
        assets[key.to_user_string()] = answer
    # Each check's executions (planned, then evaluated) by run: a run's check plans
    # are stored one by one, after its planned materializations, in the same batch.
    checks = {
        check.to_user_string(): sorted(
            (position[r.run_id], r.status.value)
            for r in instance.event_log_storage.get_asset_check_execution_history(check, limit=10_000)
        )
        for check in sorted(graph.asset_check_keys, key=lambda k: k.to_user_string())
    }
    history = []
    for run in runs:
        stats = instance.get_run_stats(run.run_id)
        events = Counter(e.dagster_event_type.value for e in instance.all_logs(run.run_id) if e.dagster_event)
        tags = {k: v for k, v in run.tags.items() if not k.startswith("mce/")}
        history.append({
            "status": run.status.value,
            "tags": tags,
            "steps": (stats.steps_succeeded, stats.steps_failed, stats.materializations),
            "events": dict(sorted(events.items())),
        })
    return {"assets": assets, "checks": checks, "runs": history}


GRAPHQL = """
{
  assetNodes {
    assetKey { path }
    dependencyKeys { path }
    dependedByKeys { path }
    assetPartitionStatuses { ... on DefaultPartitionStatuses { materializedPartitions failedPartitions unmaterializedPartitions materializingPartitions } }
    partitionStats { numMaterialized numFailed numMaterializing numPartitions }
  }
  assetsOrError { ... on AssetConnection { nodes { key { path } assetMaterializations(limit: 10000) { partition runId } } } }
  runsOrError {
    ... on Runs { results { runId status stats { ... on RunStatsSnapshot { stepsSucceeded stepsFailed materializations } } } }
  }
}
"""


def graphql_answers(instance: dg.DagsterInstance, origin: LoadableTargetOrigin) -> dict:
    """The same questions through the webserver's GraphQL schema, in process."""
    target = InProcessWorkspaceLoadTarget(InProcessCodeLocationOrigin(origin))
    with WorkspaceProcessContext(instance, target) as process:
        data = execute_dagster_graphql(process.create_request_context(), GRAPHQL).data
    runs = data["runsOrError"]["results"]
    position = {r["runId"]: i for i, r in enumerate(reversed(runs))}
    for r in runs:
        r["runId"] = position[r["runId"]]
    for node in data["assetsOrError"]["nodes"]:
        node["assetMaterializations"] = sorted((m["partition"], position[m["runId"]]) for m in node["assetMaterializations"])
    for key in ("assetNodes",):
        data[key] = sorted(data[key], key=lambda n: n["assetKey"]["path"])
    data["assetsOrError"]["nodes"].sort(key=lambda n: n["key"]["path"])
    return data


# -- the trivial chain: a good run, a run failing on some sessions, one in progress ----


TRIVIAL_ORIGIN = LoadableTargetOrigin(python_file=str(REPO / "bench" / "bookkeeping_assets.py"), attribute="defs", working_directory=str(REPO))
GOOD = [f"s{i:02d}" for i in range(6)]
FAILING = ["s06", "s07-fail"]
OPEN = ["s08", "s09"]


def play_trivial(instance: dg.DagsterInstance) -> list[dict]:
    """The answers after each step of one story, on whichever instance."""
    instance.add_dynamic_partitions("sessions", GOOD + FAILING + OPEN)
    job = trivial.defs.resolve_job_def(trivial.JOB)
    seen = []
    assert job.execute_in_process(instance=instance, tags=span(GOOD), run_config=QUIET).success
    seen.append((instance_answers(instance, trivial.defs), graphql_answers(instance, TRIVIAL_ORIGIN)))
    assert not job.execute_in_process(instance=instance, tags=span(FAILING), run_config=QUIET, raise_on_error=False).success
    seen.append((instance_answers(instance, trivial.defs), graphql_answers(instance, TRIVIAL_ORIGIN)))
    # A run created, its materializations planned, not finished: then reported failed,
    # as a run whose process died is.
    run = instance.create_run_for_job(job, tags=span(OPEN), run_config=QUIET)
    seen.append((instance_answers(instance, trivial.defs), graphql_answers(instance, TRIVIAL_ORIGIN)))
    instance.report_run_failed(run, "its process is gone")
    seen.append((instance_answers(instance, trivial.defs), graphql_answers(instance, TRIVIAL_ORIGIN)))
    return seen


@pytest.fixture(scope="module")
def trivial_story(tmp_path_factory):
    root = tmp_path_factory.mktemp("trivial")
    return {kind: play_trivial(open_instance(root / kind, kind)) for kind in ("stock", "project")}


def test_partition_status_runs_and_lineage_match_stock_sqlite(trivial_story):
    stock, project = trivial_story["stock"], trivial_story["project"]
    for step, (ours, theirs) in enumerate(zip(project, stock)):
        assert ours[0] == theirs[0], f"instance answers differ after step {step}"
        assert ours[1] == theirs[1], f"GraphQL answers differ after step {step}"


def test_the_answers_are_the_right_ones(trivial_story):
    after_good, after_failing, in_progress, after_death = (answers for answers, _ in trivial_story["project"])
    a2 = after_good["assets"]["a2"]
    assert a2["materialized"] == GOOD and a2["cache"]["failed"] == [] and a2["parents"] == ["a1"]
    assert len(a2["materializations"]) == len(GOOD)

    # a2 raises on the failing run: it and what depends on it fail on both sessions.
    for name, failed in (("a0", []), ("a1", []), ("a2", FAILING), ("a4", FAILING)):
        cache = after_failing["assets"][name]["cache"]
        assert cache["failed"] == failed, name
        assert cache["materialized"] == (GOOD if failed else GOOD + FAILING), name
    assert after_failing["assets"]["a4"]["status"]["s07-fail"] == "FAILED"
    assert [r["status"] for r in after_failing["runs"]] == ["SUCCESS", "FAILURE"]
    assert after_failing["runs"][0]["steps"] == (5, 0, 5 * len(GOOD))
    assert after_failing["runs"][1]["events"]["ASSET_MATERIALIZATION_PLANNED"] == 5 * len(FAILING)

    assert in_progress["assets"]["a0"]["cache"]["in_progress"] == OPEN
    assert in_progress["assets"]["a0"]["status"]["s08"] == "IN_PROGRESS"
    assert after_death["assets"]["a0"]["cache"]["failed"] == OPEN
    assert after_death["assets"]["a4"]["cache"]["in_progress"] == []

    nodes = {tuple(n["assetKey"]["path"]): n for n in trivial_story["project"][1][1]["assetNodes"]}
    assert nodes[("a2",)]["assetPartitionStatuses"]["failedPartitions"] == FAILING
    assert nodes[("a2",)]["partitionStats"] == {"numMaterialized": 6, "numFailed": 2, "numMaterializing": 0, "numPartitions": 10}
    assert [k["path"] for k in nodes[("a2",)]["dependedByKeys"]] == [["a3"]]


# -- the real project: the default job, a metric failing on a session, a failed run ----


@pytest.fixture(scope="module")
def project_sessions(kg, tmp_path_factory):
    from mce_dagster.ingest import ingest_paths
    from mce_dagster.synthetic import write_export
    from test_ingest import row

    root = tmp_path_factory.mktemp("sessions")
    write_export(root / "synthetic.json", 4, 3)
    # Its LLM call records no usage: TokenCount fails on it, the others are stored.
    (root / "nousage.json").write_text(json.dumps([
        row("nu-wf", "a.workflow", session="no-usage", duration_ns=3_000_000_000),
        row("nu-llm", "x.chat", parent="nu-wf", session="no-usage", **{"gen_ai.request.model": "gpt-4o"}),
    ]))
    return ingest_paths([root / "synthetic.json", root / "nousage.json"], kg).sessions


def test_the_default_job_gives_the_same_answers_on_both_storages(project_sessions, tmp_path):
    from mce_dagster.defs.jobs import EVALUATE_JOB
    from mce_dagster.definitions import defs

    origin = LoadableTargetOrigin(module_name="mce_dagster.definitions", attribute="defs", working_directory=str(REPO))
    job = defs.resolve_job_def(EVALUATE_JOB)
    seen = {}
    for kind in ("stock", "project"):
        instance = open_instance(tmp_path / kind, kind)
        # "ghost" is a partition the graph does not hold: session_context fails the run.
        instance.add_dynamic_partitions("sessions", [*project_sessions, "ghost"])
        good = job.execute_in_process(instance=instance, tags=span(project_sessions), run_config=QUIET)
        assert good.success
        failed = job.execute_in_process(instance=instance, tags=span([project_sessions[-1], "ghost"]), run_config=QUIET, raise_on_error=False)
        assert not failed.success
        seen[kind] = (instance_answers(instance, defs), graphql_answers(instance, origin))
    assert seen["project"][0] == seen["stock"][0]
    assert seen["project"][1] == seen["stock"][1]
    answers = seen["project"][0]["assets"]
    token = answers["LLMCall/TokenCount"]
    assert any('"failed": "1"' in m for _, m in token["metadata"]), token["metadata"]  # it failed on no-usage
    checks = seen["project"][0]["checks"]
    # Each check of the job ran in the good run; the failed run planned it (the plans
    # are stored) and never ran it. Checks of metrics the job leaves out have none.
    in_job = {k: runs for k, runs in checks.items() if runs}
    assert len(in_job) > 40 and all(runs == [(0, "SUCCEEDED"), (1, "PLANNED")] for runs in in_job.values()), in_job
    duration = answers["Session/Duration"]
    assert duration["cache"]["failed"] == sorted([project_sessions[-1], "ghost"])
    assert duration["materialized"] == sorted(project_sessions)


# -- a batch that fails halfway ----------------------------------------------------------


def test_a_batch_that_fails_halfway_is_written_once(tmp_path, capfd):
    """The index shard refuses one materialization, once: the whole batch rolls back,
    and Dagster's fallback writes each event one by one, each exactly once."""
    instance = open_instance(tmp_path / "project", "project")
    storage = instance.event_log_storage
    refusals = []

    def refuse_once(partition):
        if partition == "s03" and not refusals:
            refusals.append(partition)
            return 1
        return 0

    engine = storage._engine(INDEX_SHARD_NAME)
    db.event.listen(engine, "connect", lambda conn, _: conn.create_function("refuse_once", 1, refuse_once))
    engine.dispose()  # pooled connections get the function as they reconnect
    with engine.begin() as conn:
        conn.execute(db.text(
            "CREATE TRIGGER refuse AFTER INSERT ON event_logs "
            "WHEN NEW.dagster_event_type = 'ASSET_MATERIALIZATION' AND NEW.asset_key = '[\"a1\"]' "
            "AND refuse_once(NEW.partition) BEGIN SELECT RAISE(ABORT, 'refused'); END"
        ))
    instance.add_dynamic_partitions("sessions", GOOD)
    result = trivial.defs.resolve_job_def(trivial.JOB).execute_in_process(instance=instance, tags=span(GOOD), run_config=QUIET)
    assert result.success
    assert refusals == ["s03"]
    assert "Exception while storing event batch" in capfd.readouterr().err

    materialized = [r.partition_key for r in instance.fetch_materializations(dg.AssetKey("a1"), limit=1000).records]
    assert sorted(materialized) == GOOD  # in the index shard, once each
    in_run = [e.dagster_event.partition for e in instance.all_logs(result.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
              if e.dagster_event.asset_key == dg.AssetKey("a1")]
    assert sorted(in_run) == GOOD  # in the run's shard, once each
    assert sorted(instance.get_materialized_partitions(dg.AssetKey("a1"))) == GOOD


def test_partition_keys_are_read_once_and_every_change_is_seen(tmp_path, monkeypatch):
    """Dagster reads every key of the sessions definition for each asset of a run;
    the project's storage reads them once while the table shows no change, sees its
    own changes and keys added by another instance (another process) at once, and a
    deletion by another instance once its cached keys are MAX_AGE_S old."""
    from mce_dagster.instance import partitions

    reads = []
    fetch = SqlEventLogStorage.get_dynamic_partitions

    def counted(self, name):
        reads.append(name)
        return fetch(self, name)

    monkeypatch.setattr(SqlEventLogStorage, "get_dynamic_partitions", counted)
    monkeypatch.setattr(partitions, "MAX_AGE_S", 0.5)
    home = tmp_path / "project"
    mine, other = open_instance(home, "project"), dg.DagsterInstance.from_config(str(home))
    mine.add_dynamic_partitions("sessions", ["a", "b"])
    assert [mine.get_dynamic_partitions("sessions") for _ in range(3)] == [["a", "b"]] * 3
    assert len(reads) == 1
    other.add_dynamic_partitions("sessions", ["c"])
    assert mine.get_dynamic_partitions("sessions") == ["a", "b", "c"]
    other.delete_dynamic_partition("sessions", "a")
    assert other.get_dynamic_partitions("sessions") == ["b", "c"]
    time.sleep(0.6)
    assert mine.get_dynamic_partitions("sessions") == ["b", "c"]
    mine.delete_dynamic_partition("sessions", "c")
    mine.add_dynamic_partitions("sessions", ["d"])  # SQLite gives it the freed id
    assert mine.get_dynamic_partitions("sessions") == ["b", "d"]
    time.sleep(0.6)
    assert other.get_dynamic_partitions("sessions") == ["b", "d"]
    assert mine.get_dynamic_partitions("other") == []
    # A run over a range of sessions resolves its keys from the cached list.
    reads.clear()
    keys = [f"s{i:03d}" for i in range(50)]
    mine.add_dynamic_partitions("sessions", keys)
    result = trivial.defs.resolve_job_def(trivial.JOB).execute_in_process(instance=mine, tags=span(keys[10:20]), run_config=QUIET)
    assert result.success
    assert sorted(mine.get_materialized_partitions(dg.AssetKey("a1"))) == keys[10:20]
    assert 1 <= reads.count("sessions") <= 2, reads


# -- files, formats and what the subclass rests on --------------------------------------


def test_an_older_local_instance_is_upgraded_and_keeps_its_runs(tmp_path, monkeypatch):
    from mce_dagster.runner import dagster_instance

    home = tmp_path / "dagster"
    home.mkdir()
    old = "# A local Dagster instance (SQLite under this folder), made by mce.\n# For production settings see dagster.yaml at the root of the project.\ntelemetry:\n  enabled: false\n"
    (home / "dagster.yaml").write_text(old)
    before = dg.DagsterInstance.from_config(str(home))
    assert type(before.event_log_storage) is SqliteEventLogStorage
    before.add_dynamic_partitions("sessions", GOOD)
    job = trivial.defs.resolve_job_def(trivial.JOB)
    first = job.execute_in_process(instance=before, tags=span(GOOD), run_config=QUIET)

    monkeypatch.setenv("DAGSTER_HOME", str(home))
    instance = dagster_instance()
    assert type(instance.event_log_storage) is PooledSqliteEventLogStorage
    assert (home / "dagster.yaml").read_text().startswith(MARKER + ", format 2.")
    assert instance.get_run_by_id(first.run_id).status == dg.DagsterRunStatus.SUCCESS
    assert sorted(instance.get_materialized_partitions(dg.AssetKey("a4"))) == GOOD
    second = job.execute_in_process(instance=instance, tags=span(GOOD), run_config=QUIET)
    assert len(instance.fetch_materializations(dg.AssetKey("a4"), limit=100).records) == 2 * len(GOOD)
    # Stock storage reads what the project's wrote: same files, same schema.
    stock_again = SqliteEventLogStorage(str(home / "history" / "runs"))
    assert len(stock_again.get_logs_for_run(second.run_id)) == len(instance.all_logs(second.run_id))


def test_a_users_own_dagster_yaml_is_left_alone(tmp_path):
    home = tmp_path / "dagster"
    home.mkdir()
    mine = "telemetry:\n  enabled: false\n"
    (home / "dagster.yaml").write_text(mine)
    assert not write_local_config(home)
    assert (home / "dagster.yaml").read_text() == mine
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "dagster.yaml").write_text(LOCAL_INSTANCE_YAML.format(marker=MARKER, runs='"/elsewhere/"', events='"/elsewhere/runs/"', schedules='"/x"'))
    assert write_local_config(moved)  # an mce file pointing elsewhere is rewritten
    assert str(moved.resolve()) in (moved / "dagster.yaml").read_text()


def test_a_new_local_instance_opened_by_many_at_once_is_created_once(tmp_path):
    """Stock Dagster, opened by several threads on one fresh folder, stamps the run
    storage's schema twice and refuses every later open; mce's first open is locked."""
    from test_files import at_once

    def open_and_list(home):
        prepare_local_instance(home)
        with dg.DagsterInstance.from_config(str(home)) as instance:
            return len(instance.get_run_records())

    for attempt in range(5):
        home = tmp_path / f"home{attempt}"
        outcomes = at_once(lambda: open_and_list(home), n=4)
        assert outcomes == [0, 0, 0, 0], outcomes
        for name in ("history/runs.db", "history/runs/index.db", "schedules/schedules.db"):
            with sqlite3.connect(home / name) as db:
                assert db.execute("SELECT count(*) FROM alembic_version").fetchone() == (1,), name
    # An instance already created is not opened again to prepare it.
    created = (home / "history" / "runs.db").stat().st_mtime_ns
    assert not prepare_local_instance(home)
    assert (home / "history" / "runs.db").stat().st_mtime_ns == created


def test_the_private_dagster_parts_it_rests_on(tmp_path):
    assert dg.__version__ == "1.13.27"
    base = SqliteEventLogStorage
    assert list(inspect.signature(base._connect).parameters) == ["self", "shard"]
    assert list(inspect.signature(base._initdb).parameters) == ["self", "engine", "for_index_shard"]
    assert "_initialized_dbs" in inspect.getsource(base.__init__)
    assert list(inspect.signature(SqlEventLogStorage._event_to_row).parameters) == ["self", "event"]
    assert list(inspect.signature(SqlEventLogStorage._get_asset_entry_values).parameters) == ["self", "event", "event_id", "has_asset_key_index_cols"]
    assert list(inspect.signature(SqlEventLogStorage._store_asset_event_tags).parameters) == ["self", "conn", "events", "event_ids"]
    assert list(inspect.signature(SqlEventLogStorage._has_asset_key_col_on_connection).parameters) == ["self", "conn", "column_name"]
    # The stock store_event: run shard, then its mirror and the asset row in the index,
    # through run_connection/index_transaction (which the batch joins).
    source = inspect.getsource(base.store_event)
    assert "self.run_connection(run_id)" in source and "self.index_transaction()" in source
    assert "self._store_asset_event(conn, event, event_id)" in source
    # A materialization sets every asset-row column the other asset events set.
    assert BATCH_WRITABLE_EVENTS == {
        DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.ASSET_OBSERVATION,
        DagsterEventType.ASSET_FAILED_TO_MATERIALIZE, DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
        DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED,
    }
    assert DagsterEventType.ASSET_MATERIALIZATION in ASSET_EVENTS
    # The partition-key cache: the keys are read from this table, by these methods.
    assert {"id", "partitions_def_name", "partition"} <= set(DynamicPartitionsTable.c.keys())
    assert "DynamicPartitionsTable" in inspect.getsource(SqlEventLogStorage.get_dynamic_partitions)
    for name in ("_check_partitions_table", "index_connection", "add_dynamic_partitions", "delete_dynamic_partition"):
        assert callable(getattr(SqlEventLogStorage, name)), name
    # Failures are not stored on SQLite, so they never reach a batch.
    assert not PooledSqliteEventLogStorage(str(tmp_path)).can_store_asset_failure_events
    # SQLite must take multi-row RETURNING (3.35) for one insert per batch.
    assert sqlite3.sqlite_version_info >= (3, 35)
