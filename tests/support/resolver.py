"""A resolver in a test's hands: chosen host names fail, hang, or get scripted answers (the
next one at each lookup: a rebinding DNS); every other name resolves.

It replaces socket.getaddrinfo, which asyncio's loop.getaddrinfo calls in a thread, so the code
under test resolves as it does in production, and so does any second lookup, by the HTTP client
or anyone. Use it through the `resolver` fixture, which puts the real function back and frees
any hanging lookup. `resolve` gives the same answers to a code's injected resolver
(webhook_targets.Resolve), without replacing anything.
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
        # A name's answers, one list of addresses a lookup; the last one repeats.
        self.answers: dict[str, list[list[str]]] = {}
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
        if name in self.answers:
            port = int(args[0] or 0) if args else int(kwargs.get("port") or 0)
            return [_info(address, port) for address in self._next_answer(name)]
        return _real_getaddrinfo(host, *args, **kwargs)

    async def resolve(self, host: str) -> list[str]:
        """The scripted answers, for an injected resolver; other names do not resolve."""
        self.lookups.append(host)
        if host in self.failing or host not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self._next_answer(host)

    def _next_answer(self, name: str) -> list[str]:
        answers = self.answers[name]
        return answers.pop(0) if len(answers) > 1 else answers[0]


def _info(address: str, port: int) -> tuple[Any, ...]:
    """One getaddrinfo entry for a stream socket to `address`."""
    if ":" in address:
        return (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port, 0, 0))
    return (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))


@contextmanager
def fake_resolver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Resolver]:
    resolver = Resolver()
    monkeypatch.setattr(socket, "getaddrinfo", resolver.getaddrinfo)
    try:
        yield resolver
    finally:
        resolver.release()
        monkeypatch.setattr(socket, "getaddrinfo", _real_getaddrinfo)
