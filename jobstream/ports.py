"""A free loopback TCP port for a server started later: the embedded PostgreSQL of `make run`,
and every server, proxy and pooler the tests start.

Binding port 0 and closing the socket hands out a port from the kernel's ephemeral range, where
two hazards wait before the server binds it: the kernel may hand the same port to the next such
call (a test starting nginx and two servers asks three times in a row; CI saw nginx and a server
given one port), and any outgoing connection of the machine may take it as its source port. So
the ports come from below the ephemeral range, in sequence from a random start per process,
never twice in one process, each one bound once to check nothing holds it now. Processes that
ask side by side (the suite's pytest-xdist workers) each take a slice of the range of their own
(`partition`), so two of them cannot be handed one port between its check and its bind.
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
# This process's slice of the range: (index, count); None for the whole range.
_slice: tuple[int, int] | None = None


def partition(index: int, count: int) -> None:
    """From now on, hand out ports only from the `index`-th of `count` equal slices of the
    range: one slice per process of a group that starts servers side by side."""
    global _slice, _next
    if not 0 <= index < count:
        raise ValueError(f"slice {index} of {count}")
    with _lock:
        _slice, _next = (index, count), None


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
    with _lock:
        lowest, span = _LOWEST, _ephemeral_start() - _LOWEST
        if _slice is not None:
            index, count = _slice
            span //= count
            lowest += index * span
        if span < 100:
            return _kernel_port(host)
        if _next is None:
            _next = lowest + random.SystemRandom().randrange(span)
        for _ in range(span):
            port = _next
            _next = lowest + (_next + 1 - lowest) % span
            if port not in _handed_out and _bindable(host, port):
                _handed_out.add(port)
                return port
    return _kernel_port(host)
