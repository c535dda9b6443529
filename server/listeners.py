"""The server's listeners: the API's on JOBSTREAM_HOST:JOBSTREAM_PORT and, with
JOBSTREAM_METRICS_PORT set, a second one on JOBSTREAM_METRICS_HOST for a private scrape network
that serves /metrics, /healthz and /readyz only (the API's port then answers /metrics with 404).

One uvicorn serves both sockets, so they share one app: one lifespan and pool, one stop, and a
port that cannot be bound stops the start. A request tells which listener took it by the local
port it came in on (`scope["server"]`, the socket's own address, which no proxy header changes).
"""

from __future__ import annotations

import socket

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from jobstream.server import problems
from jobstream.settings import Settings

METRICS_PATHS = frozenset({"/metrics", "/healthz", "/readyz"})


def on_metrics_listener(scope: Scope, settings: Settings) -> bool:
    server, port = scope.get("server"), settings.metrics_port
    return port is not None and server is not None and server[1] == port


class ListenerRoutes:
    """Each listener's paths: the metrics listener's three, everything but /metrics on the
    API's (when there is a metrics listener at all)."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.settings.metrics_port is not None:
            path = scope["path"]
            if on_metrics_listener(scope, self.settings):
                elsewhere = path not in METRICS_PATHS
            else:
                elsewhere = path == "/metrics"
            if elsewhere:
                response = problems.response(problems.not_found("Not Found"))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def sockets(config: uvicorn.Config, settings: Settings) -> list[socket.socket] | None:
    """What `config`'s server serves on: None without a metrics port (uvicorn binds the API's
    host and port itself), else the API's socket and the metrics listener's, bound here."""
    if settings.metrics_port is None:
        return None
    # Only to bind as uvicorn does (its log line, its exit on a port in use); log_config=None
    # leaves the process's logging alone.
    metrics = uvicorn.Config(
        config.app, host=settings.metrics_host, port=settings.metrics_port, log_config=None
    )
    return [config.bind_socket(), metrics.bind_socket()]
