"""A TCP forwarder on loopback that a test can cut: every open connection is closed
and new ones are closed on accept for a while, which is what a client sees when the
server goes away. It can also cut itself the first time the client sends given
bytes (a Bolt statement carries its Cypher text as plain UTF-8), so a fault lands
at a chosen point of a run."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable


class CuttableProxy:
    def __init__(self, target: tuple[str, int]):
        self.target = target
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._down_until = 0.0
        self._trigger: tuple[tuple[bytes, ...], float, Callable[[], None] | None] | None = None
        self.cuts = 0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def uri(self) -> str:
        return f"bolt://127.0.0.1:{self.port}"

    def cut(self, seconds: float) -> None:
        """Drop every connection now and refuse new ones for `seconds`."""
        with self._lock:
            self.cuts += 1
        self._drop(seconds)

    def _drop(self, seconds: float) -> None:
        with self._lock:
            self._down_until = time.monotonic() + seconds
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in pair:
                _close(s)

    def cut_on(self, marker: bytes | tuple[bytes, ...], seconds: float, then: Callable[[], None] | None = None) -> None:
        """Cut (once) when a client sends `marker` (or any of several), before it
        reaches the server; `then` runs during the outage."""
        self._trigger = (marker if isinstance(marker, tuple) else (marker,), seconds, then)

    def close(self) -> None:
        self._closed = True
        _close(self._server)
        self._drop(0)

    def _down(self) -> bool:
        return time.monotonic() < self._down_until

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if self._down():
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if from_client and self._fires(data):
                    return
                sink.sendall(data)
        except OSError:
            pass
        finally:
            _close(source)
            _close(sink)

    def _fires(self, data: bytes) -> bool:
        with self._lock:
            trigger = self._trigger
            if trigger is None or not any(m in data for m in trigger[0]):
                return False
            self._trigger = None
        marker, seconds, then = trigger
        self.cut(seconds)
        if then is not None:
            then()
        return True


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
