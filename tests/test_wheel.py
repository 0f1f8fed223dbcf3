"""The package as a user installs it: the wheel built from the repository, in a
fresh virtualenv outside it, carries the catalog and the default config, and
finds a provider installed as a package of its own.

Builds and installs take PyPI's packages (the build backend, the locked
dependencies), mostly from uv's cache; only when PyPI cannot be reached does the
test skip, and in CI it fails then.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import IN_CI, REPO
from plugin_package import write_project

pytestmark = pytest.mark.wheel

UV = str(REPO / ".venv" / "bin" / "uv")
_UNREACHABLE = ("dns error", "failed to connect", "connection refused", "network is unreachable", "timed out", "failed to fetch")


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        output = done.stdout + done.stderr
        if not IN_CI and any(words in output.lower() for words in _UNREACHABLE):
            pytest.skip(f"PyPI cannot be reached: {output.strip()[-300:]}")
        pytest.fail(f"{' '.join(args[:3])} ... exited {done.returncode}:\n{output[-3000:]}")
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, Path]:
    """A virtualenv with the project's wheel (its dependencies pinned as uv.lock
    pins them) and a third-party provider's wheel, and a folder outside the
    repository to run it from."""
    root = tmp_path_factory.mktemp("wheel")
    assert REPO not in root.parents
    dist = root / "dist"
    run([UV, "build", "--wheel", "--quiet", "-o", str(dist)], cwd=REPO)
    plugin = write_project(root / "acme-metrics", "acme", "acme_metrics")
    run([UV, "build", "--wheel", "--quiet", "-o", str(dist)], cwd=plugin)
    requirements = root / "requirements.txt"
    run([UV, "export", "--frozen", "--no-dev", "--no-emit-project", "--no-hashes", "--quiet", "-o", str(requirements)], cwd=REPO)
    venv = root / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root)
    wheels = sorted(str(p) for p in dist.glob("*.whl"))
    assert len(wheels) == 2
    run([UV, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), "-r", str(requirements), *wheels], cwd=root)
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    return {"venv": venv, "cwd": elsewhere, "wheel": next(p for p in dist.glob("mce_dagster-*.whl"))}


def in_venv(installed: dict[str, Path], *args: str) -> str:
    venv, cwd = installed["venv"], installed["cwd"]
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(cwd), "MCE_HOME": str(cwd / ".mce")}
    if "LANG" in os.environ:
        env["LANG"] = os.environ["LANG"]
    return run([str(venv / "bin" / args[0]), *args[1:]], cwd=cwd, env=env)


def test_the_wheel_carries_the_catalog_and_the_config(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    shipped = {f"mce_dagster/_bundled/{p.relative_to(REPO)}" for p in (REPO / "metric_defs").rglob("*.yaml")}
    assert shipped and shipped <= names
    assert "mce_dagster/_bundled/mce_config.yaml" in names


def test_mce_metric_list_outside_the_repository(installed):
    listed = json.loads(in_venv(installed, "mce", "metric", "list", "--json"))
    by_key = {(m["provider"], m["name"]): m for m in listed}
    native = {(p.stem) for p in (REPO / "metric_defs" / "native").glob("*.yaml")}
    assert {("native", n) for n in native} <= set(by_key)
    assert ("native", "AvgLLMCallDuration") in by_key  # the aggregates file too
    assert by_key[("acme", "SpanCount")]["scopes"] == ["Session", "AgentCall"]
    table = in_venv(installed, "mce", "metric", "list")
    assert "CyclesCount" in table and "WorkflowEfficiency" in table
    providers = in_venv(installed, "mce", "provider", "list")
    assert "acme-metrics 1.0" in providers and "built in" in providers


def test_the_installed_package_reads_its_own_files(installed):
    script = (
        "import mce_dagster, json\n"
        "from mce_dagster.catalog import DEFAULT_DEFS_DIR, load_catalog\n"
        "from mce_dagster.config import DEFAULT_CONFIG_PATH, load_config\n"
        "config = load_config(load_catalog())\n"
        "print(json.dumps([mce_dagster.__file__, str(DEFAULT_DEFS_DIR), str(config.path), len(config.enabled)]))\n"
    )
    package, defs, config, enabled = json.loads(in_venv(installed, "python", "-c", script))
    site = installed["venv"] / "lib"
    for path in (package, defs, config):
        assert Path(path).is_relative_to(site), path
    assert Path(defs).parent.name == "_bundled"
    assert enabled > 10
