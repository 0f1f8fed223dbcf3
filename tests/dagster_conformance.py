"""Dagster's own conformance suite for event log storages, from the sdists of the
installed releases: `TestEventLogStorage` (dagster_tests/storage_tests/utils/
event_log_storage.py) with the SQLite subclass and its extra tests (dagster_tests/
storage_tests/test_event_log.py) from dagster's sdist, the PostgreSQL subclass
(dagster_postgres_tests/test_event_log.py) from dagster-postgres'.

Nothing of it is in the repository: `pip download --no-binary :all: --no-deps` fetches
the two sdists of the installed versions (through pip's own cache) and only those
files are unpacked into `.mce/conformance/<versions>/`, once. The packages' own
`__init__.py` files are left out (dagster_tests' imports `dagster_test`, which is
not on PyPI): empty ones stand in for them.
"""

from __future__ import annotations

import fcntl
import importlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".mce" / "conformance"

#: Distribution -> the files of its sdist the suite is made of (paths in the package).
SUITE_FILES = {
    "dagster": (
        "dagster_tests/storage_tests/utils/event_log_storage.py",
        "dagster_tests/storage_tests/test_event_log.py",
    ),
    "dagster-postgres": ("dagster_postgres_tests/test_event_log.py",),
}
#: Importable names, in the order they are imported (assertions rewritten by pytest).
MODULES = (
    "dagster_tests.storage_tests.utils.event_log_storage",
    "dagster_tests.storage_tests.test_event_log",
    "dagster_postgres_tests.test_event_log",
)


class SuiteUnavailable(RuntimeError):
    """The sdists could not be fetched (no index reachable, a release not served)."""


def installed_versions() -> dict[str, str]:
    return {dist: importlib.metadata.version(dist) for dist in SUITE_FILES}


def suite_folder(versions: dict[str, str]) -> Path:
    return CACHE / "-".join(f"{dist}-{version}" for dist, version in sorted(versions.items()))


def fetch(versions: dict[str, str] | None = None) -> Path:
    """The folder holding the suite of these versions (the installed ones by default),
    fetched and unpacked the first time; one process at a time (pytest-xdist)."""
    versions = versions or installed_versions()
    folder = suite_folder(versions)
    done = folder / ".complete"
    if done.exists():
        return folder
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return folder
        with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
            scratch = Path(scratch)
            pinned = [f"{dist}=={version}" for dist, version in versions.items()]
            got = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                 "--disable-pip-version-check", "--quiet", "-d", str(scratch / "sdists"), *pinned],
                capture_output=True, text=True, timeout=600,
            )
            if got.returncode != 0:
                said = (got.stderr or got.stdout).strip().splitlines()
                raise SuiteUnavailable(f"pip download {' '.join(pinned)} failed: {said[-1] if said else got.returncode}")
            unpacked = scratch / "suite"
            for dist, version in versions.items():
                _unpack(scratch / "sdists", dist, version, unpacked)
            for package in {Path(name).parent for names in SUITE_FILES.values() for name in names}:
                for part in (package, *package.parents[:-1]):
                    (unpacked / part / "__init__.py").touch()
            shutil.rmtree(folder, ignore_errors=True)
            unpacked.rename(folder)
        done.touch()
    return folder


def _unpack(sdists: Path, dist: str, version: str, into: Path) -> None:
    wanted_name = f"{dist}-{version}.tar.gz".replace("-", "_").lower()
    (archive,) = [p for p in sdists.iterdir() if p.name.replace("-", "_").lower() == wanted_name]
    wanted = {f"{archive.name.removesuffix('.tar.gz')}/{name}": name for name in SUITE_FILES[dist]}
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers() if m.name in wanted}
        missing = sorted(set(wanted) - set(members))
        if missing:
            raise SuiteUnavailable(f"{archive.name} has no {', '.join(missing)}: the suite moved in this release")
        for member_name, name in wanted.items():
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(members[member_name])
            assert source is not None
            target.write_bytes(source.read())


def load(versions: dict[str, str] | None = None) -> dict[str, ModuleType]:
    """The suite's modules, imported from the cache folder, by name."""
    folder = fetch(versions)
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    for name in MODULES:
        pytest.register_assert_rewrite(name)
    # dagster-postgres' module asserts that dagster's own tests sit beside the installed
    # package (true in Dagster's repository only); here they are on sys.path instead.
    import dagster._core.test_utils as test_utils

    real = test_utils.ensure_dagster_tests_import
    test_utils.ensure_dagster_tests_import = lambda: None
    try:
        return {name: importlib.import_module(name) for name in MODULES}
    finally:
        test_utils.ensure_dagster_tests_import = real


def cache_is_fresh() -> bool:
    return (suite_folder(installed_versions()) / ".complete").exists()


if __name__ == "__main__":  # python tests/dagster_conformance.py: fetch, print the folder
    print(fetch())
    os._exit(0)
