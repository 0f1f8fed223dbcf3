"""Where the shipped metric catalog and default configuration are read from.

`metric_defs/` and `mce_config.yaml` live at the top of the repository; the wheel
carries copies under `mce_dagster/_bundled/` (hatchling's `force-include`), so an
installed `mce` finds them in its own package, and a checkout in its source tree.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

_SOURCE_TREE = Path(__file__).resolve().parent.parent


def shipped_path(name: str) -> Path:
    """`metric_defs` or `mce_config.yaml`: the installed copy if there is one."""
    installed = files(__package__) / "_bundled" / name
    if isinstance(installed, Path) and installed.exists():
        return installed
    return _SOURCE_TREE / name
