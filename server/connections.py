"""The server's connections: how many it serves, and how long one may take to ask for something.

uvicorn caps connections (`limit_concurrency`: a request on one past the cap is answered 503)
but times a connection out only while it is idle after a response (`timeout_keep_alive`, which
any byte cancels). A connection that opens and never sends a whole request head, silent or a
byte at a time, stayed open for ever: 1,100 of them took every descriptor of a process with the
usual 1,024 and locked every client out. Here each request head gets a deadline, the soft
open-file limit is raised to the hard one at start, and the connection cap is derived from it.
"""

from __future__ import annotations

import asyncio
import resource
from typing import ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from jobstream.server.shutdown import draining

# Served connections get at most half the descriptors: the other half is for connections past
# the cap (until they are answered 503 or reach their head deadline), the database pool, the
# LISTEN connection and log files.
SHARE_FOR_CONNECTIONS = 0.5
# Past this many streams one process is better split into replicas than given more.
DERIVED_MAX_CONNECTIONS = 10_000
# What an unlimited hard limit (macOS) is taken as; Linux bounds it by fs.nr_open.
UNLIMITED_OPEN_FILES = 65_536


def raise_open_file_limit() -> int:
    """Raise this process's soft open-file limit to its hard limit; the soft limit in force.

    Distributions start processes at a soft 1,024 (select() cannot watch descriptors past it)
    with a far higher hard limit that an event loop on epoll can use.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = UNLIMITED_OPEN_FILES if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY:
        return target
    if soft >= target:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return soft  # refused (a sandbox, macOS past OPEN_MAX): the caller logs what it got
    return target


def open_file_limit() -> int:
    """This process's soft open-file limit now (after raise_open_file_limit, what it got)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return UNLIMITED_OPEN_FILES if soft == resource.RLIM_INFINITY else soft


def connection_limit(configured: int | None, open_files: int) -> int:
    """JOBSTREAM_MAX_CONNECTIONS, or what `open_files` descriptors can serve."""
    if configured is not None:
        return configured
    return max(1, min(DERIVED_MAX_CONNECTIONS, int(open_files * SHARE_FOR_CONNECTIONS)))


class HeadDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing a connection whose request head is late.

    The deadline runs from the connection's start, and from the end of each response, to the
    end of the next request head; bytes arriving do not extend it (a head sent a byte at a
    time is as late as a silent one). It does not run while a request is being answered, so an
    SSE stream is never cut by it. While the server drains (server/shutdown.py), a request is
    its connection's last from the moment its head is read.
    """

    head_timeout_s: ClassVar[float] = 10.0
    _head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def on_headers_complete(self) -> None:
        self._stop_waiting()
        super().on_headers_complete()
        cycle = self.cycle
        # No new cycle for a protocol upgrade: then there is none yet, or the last one's, done.
        if draining(self.server_state) and cycle is not None and not cycle.response_complete:
            # Served, with Connection: close, and then closed: the server is stopping.
            cycle.keep_alive = False

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Unless a pipelined request, its head already read, is being answered now.
        if not self.transport.is_closing() and self.cycle.response_complete:
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        self._stop_waiting()
        self._head_deadline = self.loop.call_later(self.head_timeout_s, self._head_late)

    def _stop_waiting(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_late(self) -> None:
        self._head_deadline = None
        # Closed without a 408: nothing was asked, and a client sending that slowly is gone or
        # hostile. What keep-alive's own timeout does too.
        if not self.transport.is_closing():
            self.transport.close()


def http_protocol(head_timeout_s: float) -> type[HeadDeadlineProtocol]:
    """The protocol class for uvicorn's `http=`: it builds one per connection, with no way to
    pass it a value, so the deadline rides on a subclass."""

    class ConfiguredHeadDeadline(HeadDeadlineProtocol):
        pass

    ConfiguredHeadDeadline.head_timeout_s = head_timeout_s
    return ConfiguredHeadDeadline
