"""Writing files so that a reader never sees half of one, and two writers never share a temporary file."""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def partial_path(target: Path) -> Path:
    """A name beside `target` to write before renaming it over `target`.

    Unique per call, not per process: two threads of one process (a webserver, a test
    watching a run) may write the same target at once. The file is not created here, so
    it gets the permissions the user's umask gives (not mkstemp's 0600)."""
    return target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex}.partial")


def write_text_atomically(target: Path, text: str) -> None:
    partial = partial_path(target)
    try:
        partial.write_text(text)
        partial.replace(target)  # atomic on one file system
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
