"""Another user of the machine reads nothing the engine writes: the graph's files (every
session's text), the judge cache, the Dagster instance, saved query results, exports
and reports are owner-only (files 0600, folders 0700) even when `mce` is started under
the common umask 022, and the folders of an older install are closed."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from conftest import REPO
from mce_dagster.files import private_file, private_folder, write_text_atomically
from openai_server import Completion, FakeOpenAI

MCE = str(REPO / ".venv" / "bin" / "mce")
PERMISSIVE = 0o022  # what most distributions give a login shell: files 0644, folders 0755


def open_to_others(root: Path) -> list[str]:
    """Every file group or others may read or write, every folder they may list or
    enter, under `root` (itself included)."""
    found = []
    for path in [root, *root.rglob("*")]:
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode) or stat.S_ISSOCK(mode):
            continue  # the socket's own permission is redis' --unixsocketperm 700, under a 0700 folder
        if stat.S_IMODE(mode) & 0o077:
            found.append(f"{stat.S_IMODE(mode):04o} {path.relative_to(root.parent)}")
    return found


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def home():
    # Short: the embedded server's socket lives under it.
    path = Path(tempfile.mkdtemp(prefix="mce-priv-"))
    yield path
    from mce_dagster.graph.embedded import EmbeddedFalkorDB

    EmbeddedFalkorDB(path).stop()
    shutil.rmtree(path, ignore_errors=True)


def judge(request):
    return Completion("It answers.\nScore: 4", {"4": 1.0}, 20, 3)


def test_nothing_a_demo_writes_is_readable_by_another_user(home, tmp_path):
    dagster_home = home / "dagster"
    # An older install: its folders were made open under the same umask.
    (home / "falkordb").mkdir(parents=True)
    dagster_home.mkdir()
    for folder in (home, home / "falkordb", dagster_home):
        folder.chmod(0o755)
    shared = tmp_path / "shared"  # where a person keeps exports and reports: not the project's folder
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)

    with FakeOpenAI(judge) as server:
        env = {
            **os.environ, "MCE_HOME": str(home), "DAGSTER_HOME": str(dagster_home), "MODEL_PRICES_REFRESH": "false",
            "LLM_MODEL_NAME": "gpt-4o-mini", "OPENAI_API_KEY": "sk-local-test", "LLM_BASE_MODEL_URL_MCE": server.base_url,
            "MCE_JUDGE_CACHE": "live",
        }

        def mce(*args: str) -> subprocess.CompletedProcess:
            done = subprocess.run([MCE, *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=300, umask=PERMISSIVE)
            assert done.returncode == 0, (args, done.stderr[-3000:])
            return done

        mce("demo", "--sessions", "4", "--seed", "1")  # judged metrics too: the cache is written
        assert (home / "judge-cache.sqlite").exists() and list((home / "falkordb" / "appendonlydir").iterdir())
        mce("export", "-o", str(shared / "results.parquet"))
        mce("export", "-o", str(shared / "results.csv"), "--format", "csv")
        mce("report")  # under MCE_HOME/reports
        mce("report", "-o", str(shared / "report.html"))
    anyio.run(query_through_mcp, env)
    assert list((home / "query_results").iterdir())

    assert open_to_others(home) == []
    for written in ("results.parquet", "results.csv", "report.html"):
        assert mode_of(shared / written) == 0o600, written
    assert mode_of(shared) == 0o755  # a folder the user chose is left as it was


async def query_through_mcp(env: dict[str, str]) -> None:
    """A query_metric over `mce serve` (stdio), which saves its answer under MCE_HOME."""
    server = StdioServerParameters(command="sh", args=["-c", f"umask {PERMISSIVE:03o} && exec {MCE} serve"], env=env)
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("query_metric", {"metric": "ToolErrorRate", "scope": "Session"})
        assert not result.is_error, result


def test_files_replaced_whole_are_owner_only_whatever_the_umask(tmp_path):
    previous = os.umask(0)
    try:
        target = tmp_path / "answer.json"
        write_text_atomically(target, "{}")
        assert mode_of(target) == 0o600
        target.chmod(0o644)  # written by an older version
        write_text_atomically(target, "{}")
        assert mode_of(target) == 0o600 and target.read_text() == "{}"
        assert not list(tmp_path.glob(".answer.json.*"))

        cache = private_file(tmp_path / "cache.sqlite")
        assert mode_of(cache) == 0o600 and cache.read_bytes() == b""
        cache.chmod(0o644)
        assert mode_of(private_file(cache)) == 0o600

        folder = private_folder(tmp_path / "home" / "falkordb")
        assert mode_of(folder) == 0o700
        folder.chmod(0o755)
        private_folder(folder)
        assert mode_of(folder) == 0o700
    finally:
        os.umask(previous)


def test_keep_private_never_loosens_a_stricter_umask():
    script = "import os\nfrom mce_dagster.files import keep_private\nkeep_private()\nprint(oct(os.umask(0)))"
    for started, expected in ((0o000, "0o77"), (0o022, "0o77"), (0o277, "0o277")):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, umask=started, cwd=REPO)
        assert done.stdout.strip() == expected, (oct(started), done.stdout, done.stderr)
