"""Writing files so that a reader never sees half of one, two writers never share a
temporary file, and nobody but their owner reads them.

Everything the project writes is private: the graph's files hold every session's text
(prompts, answers, tool outputs), the judge cache its replies, the Dagster instance
the runs' logs. So files are owner-only (0600) and folders too (0700), whatever the
umask a process was started with: every entry point calls `keep_private()` first,
and the folders the project names (MCE_HOME, DAGSTER_HOME and theirs) are tightened
when an older version left them open.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

log = logging.getLogger(__name__)

#: Cleared for group and others in every file and folder a process creates.
PRIVATE_UMASK = 0o077
PRIVATE_FILE = 0o600
PRIVATE_FOLDER = 0o700


def keep_private() -> None:
    """From now on, what this process creates, and what the processes it starts create
    (the embedded redis-server, run workers), is owner-only. A umask stricter already
    stays as it is."""
    looser = os.umask(PRIVATE_UMASK)
    os.umask(looser | PRIVATE_UMASK)


def _tighten(path: Path, private_mode: int) -> None:
    mode = path.stat().st_mode & 0o777
    if not mode & ~private_mode:
        return
    try:
        path.chmod(mode & private_mode)
    except OSError as exc:  # another user's: say so, the work still goes on
        log.warning("%s stays open to other users (mode %s): %s", path, oct(mode), exc.strerror)


def private_folder(path: Path) -> Path:
    """`path` as a folder only its owner may list or enter: created so (with its
    missing parents), or tightened when it was open to others."""
    path = Path(path)
    path.mkdir(mode=PRIVATE_FOLDER, parents=True, exist_ok=True)
    _tighten(path, PRIVATE_FOLDER)
    return path


def private_file(path: Path) -> Path:
    """`path` as a file only its owner may read: created empty so when absent (a
    database then opens it and keeps its mode), tightened when it was open to others."""
    path = Path(path)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
    except FileExistsError:
        _tighten(path, PRIVATE_FILE)
    return path


def partial_path(target: Path) -> Path:
    """A name beside `target` to write before renaming it over `target`.

    Unique per call, not per process: two threads of one process (a webserver, a test
    watching a run) may write the same target at once."""
    return target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex}.partial")


def write_text_atomically(target: Path, text: str, encoding: str = "utf-8") -> None:
    """`target` replaced whole by `text`, owner-only whatever the umask."""
    partial = partial_path(target)
    try:
        with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE), "w", encoding=encoding) as handle:
            handle.write(text)
        partial.replace(target)  # atomic on one file system
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
