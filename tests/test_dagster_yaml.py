"""One source for every dagster.yaml: the local instance `mce` writes and the three
production files of the repository are made of the same sections
(mce_dagster.instance.dagster_yaml), and the committed files are what it writes."""

from __future__ import annotations

import shutil
import subprocess
import sys

import yaml

from conftest import REPO
from mce_dagster.instance import dagster_yaml
from mce_dagster.instance.local import LOCAL_INSTANCE_YAML, local_instance_yaml


def test_the_committed_files_are_what_the_sections_make():
    assert dagster_yaml.stale(REPO) == [], "run `python -m mce_dagster.instance.dagster_yaml`"
    for path in dagster_yaml.FILES:
        assert dagster_yaml.GENERATED in (REPO / path).read_text()


def test_shared_sections_are_written_once():
    production = [yaml.safe_load(dagster_yaml.render(p)) for p in dagster_yaml.FILES]
    for section in ("run_storage", "event_log_storage", "schedule_storage", "run_coordinator", "run_retries", "telemetry"):
        assert all(config[section] == production[0][section] for config in production), section
    assert production[0]["run_launcher"] == yaml.safe_load(dagster_yaml.LOCAL_LAUNCHER)["run_launcher"]
    local = yaml.safe_load(local_instance_yaml(REPO / ".mce-template-check"))
    assert local["run_launcher"] == production[0]["run_launcher"] and local["telemetry"] == production[0]["telemetry"]
    assert local["event_log_storage"]["class"] == "PooledSqliteEventLogStorage"
    assert LOCAL_INSTANCE_YAML == dagster_yaml.local_template()


def test_check_says_which_file_differs_and_the_writer_puts_it_back(tmp_path):
    root = tmp_path / "repo"
    for path in dagster_yaml.FILES:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / path, root / path)
    (root / "deploy" / "dagster.yaml").write_text("telemetry:\n  enabled: true\n")
    command = [sys.executable, "-m", "mce_dagster.instance.dagster_yaml"]
    check = subprocess.run([*command, "--check", str(root)], capture_output=True, text=True, cwd=REPO)
    assert check.returncode == 1 and "deploy/dagster.yaml differs" in check.stderr and "k8s" not in check.stderr
    assert subprocess.run([*command, str(root)], capture_output=True, text=True, cwd=REPO).returncode == 0
    assert (root / "deploy" / "dagster.yaml").read_text() == (REPO / "deploy" / "dagster.yaml").read_text()
    assert subprocess.run([*command, "--check", str(root)], cwd=REPO).returncode == 0
