"""A resolver in a test's hands: chosen host names fail or hang; every other name resolves.

It replaces socket.getaddrinfo, which asyncio's loop.getaddrinfo calls in a thread, so the code
under test resolves as it does in production. Use it through the `resolver` fixture, which puts
the real function back and frees any hanging lookup.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

_real_getaddrinfo = socket.getaddrinfo


class Resolver:
    def __init__(self) -> None:
        self.failing: set[str] = set()  # answer "temporary failure in name resolution"
        self.hanging: set[str] = set()  # no answer until released
        self.lookups: list[str] = []
        self._released = threading.Event()

    def release(self) -> None:
        self._released.set()

    def getaddrinfo(self, host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        self.lookups.append(name)
        if name in self.hanging:
            # Bounded, so a test that forgets to release cannot leave a thread behind forever.
            self._released.wait(timeout=30)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        if name in self.failing:
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return _real_getaddrinfo(host, *args, **kwargs)


@contextmanager
def fake_resolver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Resolver]:
    resolver = Resolver()
    monkeypatch.setattr(socket, "getaddrinfo", resolver.getaddrinfo)
    try:
        yield resolver
    finally:
        resolver.release()
        monkeypatch.setattr(socket, "getaddrinfo", _real_getaddrinfo)
