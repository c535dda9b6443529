"""The server process's uvicorn: `server_ready` once it listens, and open streams ended
promptly when it stops.

uvicorn waits for open responses to finish before it runs the lifespan shutdown, and an SSE
response never finishes on its own: without a signal at the *start* of shutdown, every open stream
would hold the process until uvicorn's graceful timeout and then be cut mid-frame. The signal is
per app (several apps may share a process in the tests), unlike sse-starlette's process-global flag.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import structlog
import uvicorn

log = structlog.get_logger("server")


class Shutdown:
    """Callbacks run once, when the server begins to stop (or at once, if it already has)."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[], None]] = []
        self.begun = False

    def on_begin(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)
        if self.begun:
            callback()

    def begin(self) -> None:
        if self.begun:
            return
        self.begun = True
        for callback in self._callbacks:
            callback()


def of(app: object) -> Shutdown | None:
    """The Shutdown of an app built by create_app, or None for any other ASGI app."""
    shutdown = getattr(getattr(app, "state", None), "shutdown", None)
    return shutdown if isinstance(shutdown, Shutdown) else None


class DrainingServer(uvicorn.Server):
    """A uvicorn server that says when it listens, and tells the app it is stopping before it
    waits for open responses."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        # Set once the sockets listen: what an in-process caller (the tests' serve) waits on.
        self.listening = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # After the bind, not in the app's lifespan (which runs first): a supervisor or a test
        # that takes this line for "ready" and connects at once must find a listener.
        if self.started:
            self.listening.set()
            addresses = [
                sock.getsockname() for server in self.servers for sock in server.sockets or ()
            ]
            log.info("server_ready", addresses=[f"{a[0]}:{a[1]}" for a in addresses])

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        shutdown = of(self.config.app)
        if shutdown is not None:
            shutdown.begin()
        await super().shutdown(sockets)
