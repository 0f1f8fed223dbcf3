"""The import rules of the layout, and what each entry point loads.

The rules (see the README's map): the core imports nothing but itself and the
errors; only `settings` reads the environment; interfaces reach the graph through
`mce_dagster.graph`, never a backend; no interface imports another (the `mce serve`
command only starts the servers), and nothing below them imports an interface; only
`mce_dagster.instance` imports Dagster's private modules; commands that need no
Dagster, and the Dagster code location, import no LLM library.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mce_dagster"
INTERFACES = ("cli", "client.py", "service.py", "serve")
BACKEND_MODULES = ("mce_dagster.graph.store", "mce_dagster.graph.embedded", "mce_dagster.graph.neo4j", "falkordb", "neo4j", "redis")
HEAVY = ("litellm", "deepeval", "ragas", "opik")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_statements(path: Path) -> list[tuple[str, str | None]]:
    """(module, name imported from it or None) for every import in the file, lazy or
    not, with relative modules made absolute."""
    tree = ast.parse(path.read_text(), str(path))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.extend((module, alias.name) for alias in node.names)
    return found


def _imports(path: Path) -> set[str]:
    """Absolute names of every module the file imports, lazily or not."""
    names: set[str] = set()
    for module, name in _import_statements(path):
        names.add(module)
        if name is not None:
            names.add(f"{module}.{name}")
    return names


def _files(*parts: str) -> list[Path]:
    out: list[Path] = []
    for part in parts:
        target = PACKAGE / part
        out.extend(sorted(target.rglob("*.py")) if target.is_dir() else [target])
    return out


def test_the_rules_see_imports_they_forbid():
    """The checker itself finds relative, lazy and aliased imports."""
    probe = PACKAGE / "core" / "__init__.py"
    assert "mce_dagster.core" in _module_name(probe)
    found = _imports(PACKAGE / "client.py")
    assert "mce_dagster.graph" in found and "mce_dagster.service" in found


def test_the_core_imports_only_itself_and_the_errors():
    for path in _files("core"):
        for name in _imports(path):
            top = name.split(".")[0]
            if top == "mce_dagster":
                assert name.startswith(("mce_dagster.core", "mce_dagster.errors")), f"{path}: imports {name}"
            else:
                assert top not in ("dagster", "falkordb", "neo4j", "redis", "litellm", "typer", "rich"), f"{path}: imports {name}"


def test_interfaces_do_not_import_graph_backends():
    for path in _files(*INTERFACES):
        for name in _imports(path):
            assert not name.startswith(BACKEND_MODULES), f"{path}: imports {name}; go through mce_dagster.graph"


# The interface packages; `client.py` and `service.py` are what they (and scripts) call.
INTERFACE_PACKAGES = ("mce_dagster.cli", "mce_dagster.serve")
# `mce serve` starts the servers: the one place an interface reaches another.
SERVER_LAUNCHES = {
    "cli/serve.py": {
        ("mce_dagster.serve.guard", "check_bind"),
        ("mce_dagster.serve.api", "serve_api"),
        ("mce_dagster.serve.mcp_server", "serve_http"),
        ("mce_dagster.serve.mcp_server", "serve_stdio"),
    }
}


def _package_of(module: str) -> str | None:
    return next((p for p in INTERFACE_PACKAGES if module == p or module.startswith(p + ".")), None)


def test_no_interface_imports_another():
    offenders = []
    for path in _files("cli", "serve", "client.py"):
        own = _package_of(_module_name(path))
        allowed = SERVER_LAUNCHES.get(str(path.relative_to(PACKAGE)), set())
        for module, name in _import_statements(path):
            other = _package_of(module)
            if other is not None and other != own and (module, name) not in allowed:
                offenders.append(f"{path.relative_to(PACKAGE)}: imports {module}{'.' + name if name else ''}")
    assert not offenders, "interfaces call mce_dagster.service, not each other:\n" + "\n".join(offenders)


def test_nothing_below_the_interfaces_imports_them():
    """service.py (what every interface calls), the results, the runner, the
    definitions: none reaches back into cli/ or serve/."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if _package_of(_module_name(path)) is not None:
            continue
        for name in _imports(path):
            if _package_of(name) is not None:
                offenders.append(f"{path.relative_to(PACKAGE)}: imports {name}")
    assert not offenders, "\n".join(offenders)


def test_the_rules_see_an_interface_cycle():
    """The check reads service.py's lazy imports: one of serve/ would be seen."""
    names = _imports(PACKAGE / "service.py")
    assert "mce_dagster.queued.submit" in names and "mce_dagster.results.query.load_result" in names


def test_only_the_instance_package_imports_dagsters_private_api():
    """Dagster's private modules (`dagster._...`) change without notice between
    releases: each use sits in mce_dagster/instance/, whose modules say what they rely on."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.is_relative_to(PACKAGE / "instance"):
            continue
        for name in _imports(path):
            if name.startswith("dagster._"):
                offenders.append(f"{path.relative_to(PACKAGE)}: imports {name}")
    assert not offenders, "go through mce_dagster.instance:\n" + "\n".join(offenders)


def test_only_settings_reads_the_environment():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "settings.py" and path.parent == PACKAGE:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            reads = (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "getenv")
                and ast.unparse(node.func.value) in ("os.environ", "os")
            ) or (
                isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and ast.unparse(node.value) == "os.environ"
            ) or (
                isinstance(node, ast.Compare) and any(ast.unparse(c) == "os.environ" for c in node.comparators)
            )
            if reads:
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}")
    assert not offenders, "read the environment through mce_dagster.settings:\n" + "\n".join(offenders)


def _loaded_by(code: str, env: dict[str, str] | None = None) -> set[str]:
    """Top-level packages in sys.modules after running `code` in a fresh interpreter."""
    script = code + "\nimport json, sys\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
        env={**os.environ, **(env or {})}, cwd=PACKAGE.parent,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def _cli(*args: str) -> str:
    return (
        "from typer.testing import CliRunner\n"
        "from mce_dagster.cli import app\n"
        f"result = CliRunner().invoke(app, {list(args)!r})\n"
        "assert result.exit_code in (0, 1), (result.exit_code, result.output, result.exception)\n"
    )


def test_help_and_the_code_location_import_no_llm_library():
    assert not _loaded_by(_cli("--help")) & {"dagster", *HEAVY}
    loaded = _loaded_by("import mce_dagster.definitions")
    assert "dagster" in loaded  # the probe sees what it should
    assert not loaded & set(HEAVY)


@pytest.mark.parametrize("command", [("kg", "status"), ("kg", "metric", "get", "absent-session"), ("ingest", "absent.json")])
def test_commands_that_need_no_dagster_do_not_import_it(command, mce_home):
    loaded = _loaded_by(_cli(*command), env={"MCE_HOME": str(mce_home)})
    assert "falkordb" in loaded or command[0] == "ingest"
    assert "dagster" not in loaded, f"mce {' '.join(command)} imported dagster"


@pytest.mark.parametrize("command", [("--help",), ("ingest", "absent.json"), ("kg", "metric", "get", "absent-session")])
def test_only_tables_load_pandas_and_pyarrow(command, mce_home):
    """`mce export` and `results_frame` import them when they run, nothing else."""
    loaded = _loaded_by(_cli(*command), env={"MCE_HOME": str(mce_home)})
    assert not loaded & {"pandas", "pyarrow"}, f"mce {' '.join(command)} imported pandas or pyarrow"


# Cypher's patterns and schema statements (SQLite's CREATE INDEX ... ON is not one).
_CYPHER = re.compile(r"\b(MATCH|MERGE|CREATE|UNWIND)\s*\(|\bCREATE (INDEX|CONSTRAINT)\b[^\n]*\bFOR\s*\(")


def cypher_outside_the_graph_package(package: Path) -> list[str]:
    return sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "graph" not in path.relative_to(package).parts[:1] and _CYPHER.search(path.read_text())
    )


def test_cypher_lives_only_in_the_graph_package(tmp_path):
    assert cypher_outside_the_graph_package(PACKAGE) == []
    (tmp_path / "defs").mkdir()
    (tmp_path / "defs" / "x.py").write_text('Q = "MATCH (s:Session) RETURN s"\n')
    assert cypher_outside_the_graph_package(tmp_path) == ["defs/x.py"]
