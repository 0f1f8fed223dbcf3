"""Protocol-level health checks for the development services, standard library only.

    python3 services/probe.py bolt HOST PORT USER PASSWORD
    python3 services/probe.py amqp HOST PORT USER PASSWORD VHOST

bolt: the Bolt 4.4 handshake, HELLO with the credentials, then RUN "RETURN 1" and PULL; it
passes only when the server authenticates the user and answers the query (a server that is
still starting, or has another password, fails).
amqp: the AMQP 0-9-1 handshake up to Connection.Open-Ok on the virtual host (so the
credentials and the vhost are checked), then a clean Connection.Close.

Exit status 0 when the service answers; otherwise 1 with the reason on standard error. It
runs with any Python 3.8+ (Debian's python3 too), so `make services` needs no virtualenv.
"""

from __future__ import annotations

import socket
import struct
import sys

TIMEOUT = 5.0


class ProbeError(Exception):
    pass


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ProbeError("the server closed the connection")
        data += chunk
    return data


# --- Bolt ---------------------------------------------------------------------------------


def _ps_string(s: str) -> bytes:
    raw = s.encode()
    n = len(raw)
    if n < 16:
        return bytes([0x80 + n]) + raw
    if n < 256:
        return b"\xd0" + bytes([n]) + raw
    return b"\xd1" + struct.pack(">H", n) + raw


def _ps_map(items: dict) -> bytes:
    out = bytes([0xA0 + len(items)])
    for key, value in items.items():
        out += _ps_string(key)
        if isinstance(value, str):
            out += _ps_string(value)
        elif isinstance(value, int) and -16 <= value < 128:
            out += struct.pack(">b", value)
        else:
            raise TypeError(value)
    return out


def _bolt_send(sock: socket.socket, message: bytes) -> None:
    sock.sendall(struct.pack(">H", len(message)) + message + b"\x00\x00")


def _bolt_recv(sock: socket.socket) -> bytes:
    message = b""
    while True:
        (size,) = struct.unpack(">H", _recv_exact(sock, 2))
        if size == 0:
            if message:
                return message
            continue  # a NOOP chunk
        message += _recv_exact(sock, size)


def _ps_decode(data: bytes, i: int = 0):
    """Decodes one PackStream value at data[i:] (the types a FAILURE holds); (value, next i)."""
    marker = data[i]
    if marker < 0x80:
        return marker, i + 1
    if marker >= 0xF0:
        return marker - 0x100, i + 1
    high = marker & 0xF0
    if high in (0x80, 0x90, 0xA0, 0xB0):
        size, i = marker & 0x0F, i + 1
    elif marker in (0xD0, 0xD4, 0xD8):
        size, i = data[i + 1], i + 2
    elif marker in (0xD1, 0xD5, 0xD9):
        size, i = struct.unpack(">H", data[i + 1 : i + 3])[0], i + 3
    elif marker == 0xC0:
        return None, i + 1
    elif marker in (0xC2, 0xC3):
        return marker == 0xC3, i + 1
    elif marker == 0xC8:
        return struct.unpack(">b", data[i + 1 : i + 2])[0], i + 2
    elif marker == 0xC9:
        return struct.unpack(">h", data[i + 1 : i + 3])[0], i + 3
    elif marker == 0xCA:
        return struct.unpack(">i", data[i + 1 : i + 5])[0], i + 5
    elif marker == 0xCB:
        return struct.unpack(">q", data[i + 1 : i + 9])[0], i + 9
    else:
        raise ValueError(f"PackStream marker {marker:#x}")
    if high == 0x80 or marker in (0xD0, 0xD1):
        return data[i : i + size].decode("utf-8", "replace"), i + size
    if high == 0x90 or marker in (0xD4, 0xD5):
        items = []
        for _ in range(size):
            value, i = _ps_decode(data, i)
            items.append(value)
        return items, i
    if high == 0xA0 or marker in (0xD8, 0xD9):
        items = {}
        for _ in range(size):
            key, i = _ps_decode(data, i)
            items[key], i = _ps_decode(data, i)
        return items, i
    fields, i = [], i + 1  # a structure: skip the signature byte
    for _ in range(size):
        value, i = _ps_decode(data, i)
        fields.append(value)
    return fields, i


def _bolt_expect(sock: socket.socket, what: str) -> None:
    """Reads responses until SUCCESS; RECORDs are skipped; FAILURE or IGNORED raise."""
    while True:
        message = _bolt_recv(sock)
        signature = message[1] if len(message) > 1 else None
        if signature == 0x70:  # SUCCESS
            return
        if signature == 0x71:  # RECORD
            continue
        kind = {0x7F: "FAILURE", 0x7E: "IGNORED"}.get(signature, f"message {signature!r}")
        try:
            fields, _ = _ps_decode(message, 2)
            detail = f"{fields.get('code', '')}: {fields.get('message', '')}"
        except (ValueError, IndexError, TypeError, AttributeError, struct.error):
            detail = "".join(c for c in message.decode("utf-8", "replace") if " " <= c <= "~")
        raise ProbeError(f"{what}: {kind}: {detail}")


def bolt(host: str, port: int, user: str, password: str) -> None:
    with socket.create_connection((host, port), timeout=TIMEOUT) as sock:
        # magic, then four proposals: 4.4, and nothing else
        sock.sendall(b"\x60\x60\xb0\x17" + b"\x00\x00\x04\x04" + b"\x00" * 12)
        version = _recv_exact(sock, 4)
        if version != b"\x00\x00\x04\x04":
            raise ProbeError(f"Bolt handshake: the server chose {version.hex()}, not 4.4")
        hello = _ps_map(
            {"user_agent": "mce-services-probe/1", "scheme": "basic", "principal": user,
             "credentials": password}
        )
        _bolt_send(sock, b"\xb1\x01" + hello)
        _bolt_expect(sock, "HELLO")
        _bolt_send(sock, b"\xb3\x10" + _ps_string("RETURN 1") + _ps_map({}) + _ps_map({}))
        _bolt_expect(sock, "RUN")
        _bolt_send(sock, b"\xb1\x3f" + _ps_map({"n": -1}))
        _bolt_expect(sock, "PULL")
        _bolt_send(sock, b"\xb0\x02")  # GOODBYE


# --- AMQP 0-9-1 ---------------------------------------------------------------------------


def _shortstr(s: str) -> bytes:
    raw = s.encode()
    return bytes([len(raw)]) + raw


def _longstr(raw: bytes) -> bytes:
    return struct.pack(">I", len(raw)) + raw


def _amqp_send_method(sock: socket.socket, class_id: int, method_id: int, args: bytes) -> None:
    payload = struct.pack(">HH", class_id, method_id) + args
    sock.sendall(struct.pack(">BHI", 1, 0, len(payload)) + payload + b"\xce")


def _amqp_recv_method(sock: socket.socket) -> tuple[int, int, bytes]:
    while True:
        frame_type, _channel, size = struct.unpack(">BHI", _recv_exact(sock, 7))
        payload = _recv_exact(sock, size)
        if _recv_exact(sock, 1) != b"\xce":
            raise ProbeError("AMQP: bad frame end")
        if frame_type == 8:  # heartbeat
            continue
        if frame_type != 1:
            raise ProbeError(f"AMQP: unexpected frame type {frame_type}")
        class_id, method_id = struct.unpack(">HH", payload[:4])
        return class_id, method_id, payload[4:]


def _amqp_expect(sock: socket.socket, class_id: int, method_id: int, what: str) -> bytes:
    got_class, got_method, args = _amqp_recv_method(sock)
    if (got_class, got_method) == (10, 50):  # Connection.Close from the server
        (code,) = struct.unpack(">H", args[:2])
        text = args[3 : 3 + args[2]].decode("utf-8", "replace")
        raise ProbeError(f"AMQP {what}: the server closed the connection: {code} {text}")
    if (got_class, got_method) != (class_id, method_id):
        raise ProbeError(f"AMQP {what}: got method {got_class}.{got_method}")
    return args


def amqp(host: str, port: int, user: str, password: str, vhost: str) -> None:
    with socket.create_connection((host, port), timeout=TIMEOUT) as sock:
        sock.sendall(b"AMQP\x00\x00\x09\x01")
        first = sock.recv(8, socket.MSG_PEEK)
        if first.startswith(b"AMQP"):
            raise ProbeError(f"AMQP: the server wants protocol {first!r}")
        _amqp_expect(sock, 10, 10, "Connection.Start")
        response = b"\x00" + user.encode() + b"\x00" + password.encode()
        # capabilities: {authentication_failure_close: true}, so that bad credentials get a
        # Connection.Close with the reason instead of a dropped socket
        capabilities = _shortstr("authentication_failure_close") + b"t\x01"
        properties = _shortstr("capabilities") + b"F" + _longstr(capabilities)
        _amqp_send_method(
            sock, 10, 11,
            _longstr(properties) + _shortstr("PLAIN") + _longstr(response) + _shortstr("en_US"),
        )
        tune = _amqp_expect(sock, 10, 30, "Connection.Tune (are the credentials right?)")
        channel_max, frame_max, _heartbeat = struct.unpack(">HIH", tune[:8])
        _amqp_send_method(sock, 10, 31, struct.pack(">HIH", channel_max, frame_max, 0))
        _amqp_send_method(sock, 10, 40, _shortstr(vhost) + _shortstr("") + b"\x00")
        _amqp_expect(sock, 10, 41, f"Connection.Open of vhost {vhost!r}")
        _amqp_send_method(sock, 10, 50, struct.pack(">H", 200) + _shortstr("") + b"\x00" * 4)
        _amqp_expect(sock, 10, 51, "Connection.Close-Ok")


def main(argv: list[str]) -> int:
    try:
        if len(argv) == 5 and argv[0] == "bolt":
            bolt(argv[1], int(argv[2]), argv[3], argv[4])
        elif len(argv) == 6 and argv[0] == "amqp":
            amqp(argv[1], int(argv[2]), argv[3], argv[4], argv[5])
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except (OSError, ProbeError, struct.error) as e:
        print(f"{argv[0]} {argv[1]}:{argv[2]}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
