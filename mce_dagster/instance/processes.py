"""Is the process that ran a run still there? Host, pid and (on Linux) a token that
tells a reused pid from the original process."""

from __future__ import annotations

import os
import socket
from functools import cache
from pathlib import Path

HOST_TAG = "mce/host"
PID_TAG = "mce/pid"
PROCESS_TAG = "mce/process"


@cache
def hostname() -> str:
    return socket.gethostname()


@cache
def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat from the state on (the name may hold spaces)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def process_token(pid: int) -> str:
    """`<boot id>:<start time in ticks since boot>`, or "" where /proc is absent."""
    fields = _stat(pid)
    return f"{_boot_id()}:{fields[19]}" if fields and _boot_id() else ""


def process_started_at(pid: int) -> float | None:
    """Seconds since the epoch (to about a second), or None where unknown."""
    fields = _stat(pid)
    if not fields:
        return None
    try:
        btime = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
    except (OSError, StopIteration):
        return None
    return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def pid_running(pid: int) -> bool:
    fields = _stat(pid)
    if fields is not None:
        return fields[0] not in ("Z", "X")  # a zombie is dead, only not yet reaped
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def this_process_tags() -> dict[str, str]:
    pid = os.getpid()
    return {HOST_TAG: hostname(), PID_TAG: str(pid), PROCESS_TAG: process_token(pid)}


def tagged_process_gone(tags: dict[str, str]) -> bool | None:
    """True when the tags name a process of this host that is gone, False when it
    runs, None when the tags name none or another host's (nothing can be told)."""
    if tags.get(HOST_TAG) != hostname() or not (tags.get(PID_TAG) or "").isdigit():
        return None
    pid = int(tags[PID_TAG])
    if not pid_running(pid):
        return True
    token = tags.get(PROCESS_TAG)
    return bool(token) and process_token(pid) != token
