"""A metric provider as a third party would ship it: a package with one YAML
definition (`SpanCount`) and its function, registered through the entry-point
group. Written either as an installed distribution on a sys.path folder, or as a
project a wheel is built from."""

from __future__ import annotations

import textwrap
from pathlib import Path

DEFINITION = """\
name: SpanCount
provider: {provider}
kind: deterministic
scopes: [Session, AgentCall]
unit: spans
value_range: [0, null]
version: 1
description: Spans beneath.
"""

MODULE = '''
from pathlib import Path
from mce_dagster.catalog import Plugin
from mce_dagster.core.metric import MetricValue

def span_count(entity, inp):
    return MetricValue(value=float(len(inp.session.beneath(entity))))

def plugin():
    return Plugin(provider="{provider}", metric_defs=Path(__file__).parent / "defs", functions={{"SpanCount": span_count}})
'''

PYPROJECT = """\
[project]
name = "{dist}"
version = "1.0"

[project.entry-points."metrics_computation_engine.plugins"]
{provider} = "{module}:plugin"

[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[tool.hatch.build.targets.wheel]
packages = ["{module}"]
"""


def write_package(root: Path, provider: str, module: str) -> Path:
    package = root / module
    (package / "defs").mkdir(parents=True)
    (package / "defs" / "SpanCount.yaml").write_text(DEFINITION.format(provider=provider))
    (package / "__init__.py").write_text(textwrap.dedent(MODULE.format(provider=provider)))
    return package


def install_on_path(site: Path, provider: str, module: str, entry_point: str | None = None) -> None:
    """As pip would leave it in site-packages: the package and its dist-info."""
    write_package(site, provider, module)
    dist = site / f"{module}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 1.0\n")
    target = entry_point or f"{module}:plugin"
    (dist / "entry_points.txt").write_text(f"[metrics_computation_engine.plugins]\n{provider} = {target}\n")


def write_project(root: Path, provider: str, module: str) -> Path:
    """A project whose wheel installs the provider."""
    write_package(root, provider, module)
    (root / "pyproject.toml").write_text(PYPROJECT.format(dist=module.replace("_", "-"), provider=provider, module=module))
    return root
