"""Does the project's fork of Dagster's storages hold on another Dagster release?

    .venv/bin/python tests/check_dagster.py 1.13.28 [pytest options]   # make check-dagster DAGSTER_VERSION=1.13.28

Installs that release of every Dagster package the project depends on (the libraries
at their matching 0.x version), beside the rest of uv.lock, into a scratch virtualenv
under .mce/check-dagster/, with the project itself; then runs Dagster's event-log
conformance suite of that release (tests/test_conformance_event_log.py) on the stock
storages and on the project's, and the live-log test. Prints passed/failed per
storage and the tests that fail on the project's storage only; exits 0 when there
are none. The PostgreSQL half needs DAGSTER_PG_* (`eval "$(make -s services)"`).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRATCH = REPO / ".mce" / "check-dagster"
TESTS = ["tests/test_conformance_event_log.py", "tests/test_instance_live_logs.py"]
#: Test class -> what it runs on, in the order printed.
STORAGES = {
    "TestStockSqliteEventLogStorage": "stock SQLite",
    "TestProjectSqliteEventLogStorage": "project SQLite (local default)",
    "TestStockPostgresEventLogStorage": "stock dagster-postgres",
    "TestProjectPostgresEventLogStorage": "project PostgreSQL (dagster.yaml)",
}


def library_version(core: str) -> str:
    """dagster 1.M.P ships its libraries as 0.(M+16).P (1.13.27 -> 0.29.27)."""
    major, minor, patch = core.split(".", 2)
    if major != "1":
        raise SystemExit(f"check-dagster: {core} is not a 1.x release of dagster")
    return f"0.{int(minor) + 16}.{patch}"


def dagster_requirements(core: str) -> list[str]:
    """Every dagster package uv.lock installs, pinned to the release `core`."""
    lock = (REPO / "uv.lock").read_text()
    names = sorted(set(re.findall(r'^name = "(dagster(?:-[a-z0-9-]+)?)"$', lock, re.M)))
    core_packages = {"dagster", "dagster-webserver", "dagster-graphql", "dagster-pipes", "dagster-shared"}
    return [f"{name}=={core if name in core_packages else library_version(core)}" for name in names]


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=True, **kwargs)


def scratch_venv(core: str) -> Path:
    """A virtualenv with the release `core` and the rest of uv.lock, made once."""
    venv = SCRATCH / f"dagster-{core}"
    python = venv / "bin" / "python"
    done = venv / ".installed"
    if done.exists():
        return python
    uv = str(REPO / ".venv" / "bin" / "uv")
    run([uv, "venv", "--quiet", "--clear", "--seed", "--python", sys.executable, str(venv)])  # --seed: pip fetches the suite
    exported = subprocess.run(
        [uv, "export", "--frozen", "--quiet", "--no-hashes", "--all-extras", "--group", "dev", "--no-emit-project",
         "--no-emit-workspace"],
        cwd=REPO, check=True, capture_output=True, text=True,
    ).stdout
    locked = [line for line in exported.splitlines()
              if line.strip() and not line.lstrip().startswith("#") and not re.match(r"\s*dagster(-[a-z0-9-]+)?==", line)]
    requirements = venv / "requirements.txt"
    requirements.write_text("\n".join(locked + dagster_requirements(core)) + "\n")
    env = {**os.environ, "VIRTUAL_ENV": str(venv)}
    try:
        run([uv, "pip", "install", "--quiet", "--python", str(python), "-r", str(requirements)], env=env)
    except subprocess.CalledProcessError:
        raise SystemExit(f"check-dagster: dagster {core} and its libraries do not install beside uv.lock (above: why)") from None
    run([uv, "pip", "install", "--quiet", "--python", str(python), "--no-deps", "-e", str(REPO)], env=env)
    done.touch()
    return python


def summarize(junit: Path) -> tuple[dict[str, Counter], list[str], list[str]]:
    """Per storage: outcomes; the tests failing on a project storage and not on stock;
    every failure, named."""
    outcomes: dict[str, Counter] = {name: Counter() for name in STORAGES}
    by_test: dict[tuple[str, str], str] = {}
    failed_names = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        cls = case.get("classname", "").rsplit(".", 1)[-1]
        name = case.get("name", "")
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
            failed_names.append(f"{cls}::{name}" if cls else name)
        elif case.find("skipped") is not None:
            outcome = "skipped"
        else:
            outcome = "passed"
        if cls in outcomes:
            outcomes[cls][outcome] += 1
        by_test[(cls, name)] = outcome
    only_project = []
    for (cls, name), outcome in sorted(by_test.items()):
        if outcome != "failed" or cls.startswith("TestStock") or name.endswith("[stock]"):
            continue
        stock = by_test.get((cls.replace("TestProject", "TestStock"), name.replace("[project]", "[stock]")))
        if stock != "failed" or (cls, name) == (cls.replace("TestProject", "TestStock"), name.replace("[project]", "[stock]")):
            only_project.append(f"{cls}::{name}")
    return outcomes, only_project, failed_names


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="a dagster release, e.g. 1.13.28")
    args, pytest_args = parser.parse_known_args(argv)  # the rest goes to pytest (e.g. -k watch)
    if not re.fullmatch(r"\d+\.\d+\.\d+", args.version):
        raise SystemExit(f"check-dagster: DAGSTER_VERSION={args.version!r} is not a release number like 1.13.28")
    python = scratch_venv(args.version)
    junit = SCRATCH / f"dagster-{args.version}" / "conformance.xml"
    env = {**os.environ, "MCE_CONFORMANCE_STOCK": "1"}
    done = subprocess.run(
        [str(python), "-m", "pytest", *TESTS, "-p", "no:cacheprovider", "-q", "-rfE", f"--junitxml={junit}", *pytest_args],
        cwd=REPO, env=env,
    )
    if not junit.exists():
        print(f"check-dagster: pytest ran no test (exit {done.returncode})", file=sys.stderr)
        return 1
    outcomes, only_project, _ = summarize(junit)
    versions = subprocess.run(
        [str(python), "-c", "import dagster, dagster_postgres; print(dagster.__version__, dagster_postgres.__version__)"],
        check=True, capture_output=True, text=True,
    ).stdout.split()
    print(f"\ndagster {versions[0]}, dagster-postgres {versions[1]}: Dagster's event-log conformance suite")
    print(f"{'storage':<36}{'passed':>8}{'failed':>8}{'skipped':>9}")
    for cls, label in STORAGES.items():
        c = outcomes[cls]
        print(f"{label:<36}{c['passed']:>8}{c['failed']:>8}{c['skipped']:>9}")
    if only_project:
        print(f"FAILS on the project's storages only ({len(only_project)}):")
        for name in only_project:
            print(f"  {name}")
        return 1
    if done.returncode not in (0, 1):
        print(f"check-dagster: pytest exited {done.returncode}", file=sys.stderr)
        return 1
    print("HOLDS: every test that passes on stock passes on the project's storages")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
