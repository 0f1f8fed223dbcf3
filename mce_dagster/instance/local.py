"""The local Dagster instance `mce` keeps under DAGSTER_HOME: its dagster.yaml, its
storages created once, the environment its runs need, and runs whose process died
marked failed.

    python -m mce_dagster.instance.local [DAGSTER_HOME]   # what `make dev` runs first
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import sys
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ServiceError
from ..files import keep_private, private_folder, write_text_atomically
from .dagster_yaml import local_template
from .processes import HOST_TAG, hostname, tagged_process_gone, this_process_tags

if TYPE_CHECKING:
    import dagster as dg

#: Every dagster.yaml mce writes starts with this; mce rewrites such a file when
#: its content differs from what this version writes (an older format, a moved folder).
MARKER = "# A local Dagster instance (SQLite under this folder), made by mce"

# Events a run stores in one write: planned materializations at run start, a metric
# asset's materializations for the run's partitions. 0 writes them one by one.
EVENT_BATCH_SIZE = "1000"

#: This version's local dagster.yaml, with {marker}, {runs}, {events}, {schedules} to
#: fill in; its sections are the production files' too (`dagster_yaml`).
LOCAL_INSTANCE_YAML = local_template()


def local_instance_yaml(home: Path) -> str:
    # JSON strings are YAML strings: any path quotes safely.
    home = home.resolve()
    return LOCAL_INSTANCE_YAML.format(
        marker=MARKER,
        runs=json.dumps(f"{home}/history/"),
        events=json.dumps(f"{home}/history/runs/"),
        schedules=json.dumps(f"{home}/schedules"),
    )


def write_local_config(home: Path) -> bool:
    """Write DAGSTER_HOME/dagster.yaml if absent or made by another version of mce;
    a file without the marker is the user's and stays. True when written."""
    private_folder(home)
    config = home / "dagster.yaml"
    wanted = local_instance_yaml(home)
    if config.exists():
        current = config.read_text()
        if current == wanted or not current.startswith(MARKER):
            return False
    write_text_atomically(config, wanted)  # a webserver reading it never sees half a file
    return True


def is_local_config(home: Path) -> bool:
    """Whether DAGSTER_HOME's dagster.yaml is one `mce` wrote (not a deployment's)."""
    try:
        return (home / "dagster.yaml").read_text().startswith(MARKER)
    except OSError:
        return False


# The SQLite files LOCAL_INSTANCE_YAML's storages create, each stamped with its
# schema revision when created.
_STORAGE_FILES = ("history/runs.db", "history/runs/index.db", "schedules/schedules.db")


def _storages_created(home: Path) -> bool:
    for name in _STORAGE_FILES:
        try:
            with closing(sqlite3.connect(f"file:{home / name}?mode=ro", uri=True)) as db:
                if db.execute("SELECT count(*) FROM alembic_version").fetchone()[0] != 1:
                    return False
        except sqlite3.Error:  # absent, or created without its table yet
            return False
    return True


def prepare_local_instance(home: Path) -> bool:
    """write_local_config, then the storages created by one process at a time.

    Dagster creates a fresh SQLite storage without a lock: two processes (or threads)
    opening one new DAGSTER_HOME at once both create it and both stamp its schema
    revision, and from then on every open fails with "alembic_version has more than
    one head". The first open happens here, under a file lock. True when the
    config was written."""
    import dagster as dg

    private_folder(home)
    with (home / ".mce-instance.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        written = write_local_config(home)
        ours = (home / "dagster.yaml").read_text().startswith(MARKER)
        if ours and not _storages_created(home):
            dg.DagsterInstance.from_config(str(home)).dispose()
    return written


def set_run_environment() -> None:
    """Environment the runs of this process need (the user's setting wins)."""
    os.environ.setdefault("DAGSTER_EVENT_BATCH_SIZE", EVENT_BATCH_SIZE)


def run_tags() -> dict[str, str]:
    """Tags on every run mce starts: which process runs it, so that a later `mce`
    (or the monitoring daemon) can tell it died."""
    return this_process_tags()


def fail_runs_of_dead_processes(instance: "dg.DagsterInstance") -> list[str]:
    """Report as failed the unfinished runs that a process of this host started and
    that process is gone (killed, crashed): through the instance, so the run's event
    log says why and its planned partitions show as failed. Returns their ids."""
    import dagster as dg
    # Private: the run statuses of a run not yet finished.
    from dagster._core.storage.dagster_run import IN_PROGRESS_RUN_STATUSES

    records = instance.get_run_records(
        filters=dg.RunsFilter(statuses=[*IN_PROGRESS_RUN_STATUSES, dg.DagsterRunStatus.CANCELING], tags={HOST_TAG: hostname()})
    )
    failed = []
    for record in records:
        run = record.dagster_run
        if not tagged_process_gone(run.tags):
            continue
        current = instance.get_run_by_id(run.run_id)
        if current is None or current.is_finished:
            continue
        instance.report_run_failed(
            current,
            f"The process that ran this run (pid {run.tags['mce/pid']} on {run.tags[HOST_TAG]}) is gone: "
            "it was killed or crashed before the run ended. Marked failed by mce.",
        )
        failed.append(run.run_id)
    return failed


def open_local_instance(home: Path) -> "dg.DagsterInstance":
    """The instance under `home`, as `mce` uses it: config written or upgraded, the
    run environment set, runs of dead processes failed."""
    import dagster as dg

    prepare_local_instance(home)
    os.environ["DAGSTER_HOME"] = str(home)
    set_run_environment()
    try:
        instance = dg.DagsterInstance.get()
        fail_runs_of_dead_processes(instance)
    except Exception as exc:
        unreachable = _unreachable_database(exc)
        if unreachable is None:
            raise
        raise ServiceError(f"the Dagster instance of {home / 'dagster.yaml'} cannot reach its database: {unreachable}") from None
    return instance


def _unreachable_database(exc: BaseException) -> str | None:
    """Why the instance's database did not answer, when that is what `exc` says
    (dagster-postgres gives up after its retries; SQLAlchemy cannot connect), with
    any secret it quotes masked; None for any other error, which keeps its traceback."""
    from sqlalchemy.exc import OperationalError

    from ..settings import redact

    for cause in (exc, exc.__cause__, exc.__context__):
        if isinstance(cause, OperationalError):
            said = str(cause.orig or cause).strip().splitlines()
            return redact(said[0] if said else type(cause.orig or cause).__name__)
    if type(exc).__name__ == "DagsterPostgresException":  # without importing dagster-postgres for SQLite instances
        return redact(str(exc))
    return None


def main(argv: list[str]) -> int:
    from ..settings import Settings

    import dagster as dg

    keep_private()  # `make dev` runs this first: the storages it creates are owner-only
    home = Path(argv[0]).resolve() if argv else Settings.from_env().dagster_home
    written = prepare_local_instance(home)
    os.environ["DAGSTER_HOME"] = str(home)
    with dg.DagsterInstance.get() as instance:
        failed = fail_runs_of_dead_processes(instance)
    state = "written" if written else "kept"
    print(f"{home / 'dagster.yaml'}: {state}; runs of dead processes marked failed: {len(failed)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
