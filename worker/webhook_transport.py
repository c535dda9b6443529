"""The webhook client: its connections go to the addresses the SSRF guard checked, and nowhere else.

httpx would resolve the URL's host again when it connects, and an answer that changed since the
check (DNS rebinding: public for the check, 127.0.0.1 for the connect) would take the delivery
inward. So a delivery runs `pinned` to its check's `Allowed`, and the client's network backend
connects to those addresses instead of resolving the name. The URL itself is unchanged, so the
`Host` header, TLS SNI and the name the certificate is verified against are still the URL's host,
and the pool keys its connections on that host: a kept-alive connection was opened to a checked
address too.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import httpcore
import httpx

from jobstream.worker.webhook_targets import Allowed

_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)  # httpx's defaults

# The delivery's checked addresses, for the connects made inside `pinned`: httpx opens a
# connection in the task that sends the request, so a context variable reaches the backend.
_pin: ContextVar[Allowed | None] = ContextVar("webhook_pin", default=None)


class Unpinned(Exception):
    """A connect with no checked address to go to: a bug in the caller, never retried."""


@contextmanager
def pinned(target: Allowed | None) -> Iterator[None]:
    """Connections opened inside go only to `target`'s addresses (None: no pin)."""
    token = _pin.set(target)
    try:
        yield
    finally:
        _pin.reset(token)


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects to the pinned addresses; without a pin, only when `require_pin` is off (private
    targets allowed: nothing was checked, the name is resolved as usual)."""

    def __init__(
        self, *, require_pin: bool, network: httpcore.AsyncNetworkBackend | None = None
    ) -> None:
        self._require_pin = require_pin
        self._network = network if network is not None else httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        pin = _pin.get()
        if pin is None:
            if self._require_pin:
                raise Unpinned(f"no checked address for {host!r}: connect inside pinned()")
            return await self._network.connect_tcp(
                host, port, timeout, local_address, socket_options
            )
        if host != pin.host:
            raise Unpinned(f"asked to connect to {host!r}, but the checked host is {pin.host!r}")
        failures = []
        for address in pin.addresses:  # every one checked: try them in the resolver's order
            try:
                return await self._network.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failures.append(f"{address}: {str(exc) or type(exc).__name__}")
        raise httpcore.ConnectError(f"{host} did not connect at {'; '.join(failures)}")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise Unpinned(f"webhooks are not sent through a unix socket ({path})")

    async def sleep(self, seconds: float) -> None:
        await self._network.sleep(seconds)


class _PinnedTransport(httpx.AsyncHTTPTransport):
    def __init__(self, backend: PinnedBackend, tls: ssl.SSLContext) -> None:
        # No proxy from the environment: a proxy would resolve the host itself.
        super().__init__(verify=tls, trust_env=False, limits=_LIMITS)
        # httpx takes no network backend, so its pool is made again with ours; the rest of the
        # transport (httpx's requests, responses and errors to and from httpcore's) is kept.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=tls,
            max_connections=_LIMITS.max_connections,
            max_keepalive_connections=_LIMITS.max_keepalive_connections,
            keepalive_expiry=_LIMITS.keepalive_expiry,
            network_backend=backend,
        )


def client(
    *,
    timeout_s: float,
    require_pin: bool,
    network: httpcore.AsyncNetworkBackend | None = None,
    tls: ssl.SSLContext | None = None,
) -> httpx.AsyncClient:
    """The webhook client: pinned connects, no redirects followed (a public URL could bounce a
    delivery inward). `network` dials an address (anyio's sockets unless given); `tls` verifies
    receivers (httpx's default: certifi, or SSL_CERT_FILE / SSL_CERT_DIR)."""
    backend = PinnedBackend(require_pin=require_pin, network=network)
    transport = _PinnedTransport(backend, tls if tls is not None else httpx.create_ssl_context())
    return httpx.AsyncClient(transport=transport, timeout=timeout_s, follow_redirects=False)
