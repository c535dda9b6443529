"""A reader that asks for a stream and then never reads, over a raw socket: its receive window
is tiny and never drained, so the server's writes back up."""

from __future__ import annotations

import socket
import uuid


def stalled_reader(base_url: str, path: str) -> socket.socket:
    """A client that asks for the stream and then never reads: a tiny window, never drained."""
    host, port = base_url.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n"
        f"X-Request-Id: {uuid.uuid4()}\r\n\r\n"
    )
    sock.sendall(request.encode())
    return sock


def read_to_end(sock: socket.socket) -> bytes:
    """Everything until the response ends: the last chunk of its body, or the socket closing."""
    sock.settimeout(20)
    data = bytearray()
    while not data.endswith(b"\r\n0\r\n\r\n") and (chunk := sock.recv(65536)):
        data += chunk
    return bytes(data)
