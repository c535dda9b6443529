"""A free loopback TCP port for a server started later: the embedded PostgreSQL of `make run`,
and every server, proxy and pooler the tests start.

Binding port 0 and closing the socket hands out a port from the kernel's ephemeral range, where
two hazards wait before the server binds it: the kernel may hand the same port to the next such
call (a test starting nginx and two servers asks three times in a row; CI saw nginx and a server
given one port), and any outgoing connection of the machine may take it as its source port. So
the ports come from below the ephemeral range, in sequence from a random start per process (two
processes, e.g. two pytest-xdist workers, start far apart), never twice in one process, each one
bound once to check nothing holds it now.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Below it: clear of the well-known ports and of what root-only services tend to use.
_LOWEST = 10_000
_lock = threading.Lock()
_handed_out: set[int] = set()
_next: int | None = None


def _ephemeral_start() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _kernel_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, not in the ephemeral range, not handed out before by this
    process. Where the ephemeral range leaves no room below it, the kernel's choice."""
    global _next
    top = _ephemeral_start()
    span = top - _LOWEST
    if span < 1_000:
        return _kernel_port(host)
    with _lock:
        if _next is None:
            _next = _LOWEST + random.SystemRandom().randrange(span)
        for _ in range(span):
            port = _next
            _next = _LOWEST + (_next + 1 - _LOWEST) % span
            if port not in _handed_out and _bindable(host, port):
                _handed_out.add(port)
                return port
    return _kernel_port(host)
