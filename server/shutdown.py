"""The server process's uvicorn: `server_ready` once it listens, and open streams ended
promptly when it stops.

uvicorn waits for open responses to finish before it runs the lifespan shutdown, and an SSE
response never finishes on its own: without a signal at the *start* of shutdown, every open stream
would hold the process until uvicorn's graceful timeout and then be cut mid-frame. The signal is
per app (several apps may share a process in the tests), unlike sse-starlette's process-global flag.

Idle keep-alive connections: uvicorn closes them the moment it stops. A proxy (nginx) that picks
one of them from its cache at that moment writes a request into a closing socket and gets a
reset; it cannot resend a POST it has sent, so its client sees a 502 (the fleet test saw one in a
rolling deploy). A drain with `idle_drain_s` stops accepting, then leaves idle connections for
their peer to close: a proxy's upstream keep-alive is shorter than ours (docs/deployment.md), so
it closes them first, and a request that does arrive on one is served, its connection's last.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import structlog
import uvicorn
from uvicorn.server import ServerState

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


class DrainingState(ServerState):
    """uvicorn's state shared by a server and its connections, with whether it drains: a
    request whose head arrives then is answered as its connection's last (see connections)."""

    def __init__(self) -> None:
        super().__init__()
        self.draining = False


def draining(state: ServerState) -> bool:
    return isinstance(state, DrainingState) and state.draining


class DrainingServer(uvicorn.Server):
    """A uvicorn server that says when it listens, and tells the app it is stopping before it
    waits for open responses."""

    def __init__(self, config: uvicorn.Config, *, idle_drain_s: float = 0.0) -> None:
        super().__init__(config)
        self.server_state = DrainingState()
        # 0: idle connections closed at once, as uvicorn does (the tests' in-process servers).
        self.idle_drain_s = idle_drain_s
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
        if self.idle_drain_s > 0:
            await self._drain(sockets)
        await super().shutdown(sockets)  # closes what is left; closing twice is harmless

    async def _drain(self, sockets: list[socket.socket] | None) -> None:
        """Stop accepting; until every connection is gone (or idle_drain_s has passed), make
        each request in progress or to come its connection's last, and close no idle one
        ourselves."""
        # Before the listener closes: a request can arrive on an idle connection at any moment
        # from here, and is answered the instant its head is read (see HeadDeadlineProtocol).
        # Marking cycles from the loop below alone missed one answered within its 20 ms.
        assert isinstance(self.server_state, DrainingState)
        self.server_state.draining = True
        for server in self.servers:
            server.close()
        for sock in sockets or ():
            sock.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.idle_drain_s
        while self.server_state.connections and loop.time() < deadline and not self.force_exit:
            for connection in list(self.server_state.connections):
                cycle = getattr(connection, "cycle", None)
                if cycle is not None and not cycle.response_complete:
                    cycle.keep_alive = False  # answered with Connection: close, then closed
            await asyncio.sleep(0.02)
