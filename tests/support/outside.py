"""The network as a webhook test sees it: loopback is real, every other address is unreachable.

Given to a WebhookSender as its `network`, it records where the delivery dials; a dial to a public
address (which a correct sender makes, once it has checked it) fails at once instead of leaving the
machine. A name is resolved as anyio's connect would resolve it, through socket.getaddrinfo, so a
sender that dials by name meets the test's resolver (tests/support/resolver.py).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable

import httpcore


class LoopbackOnly(httpcore.AsyncNetworkBackend):
    def __init__(self) -> None:
        self.dialed: list[str] = []
        self._real = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        for *_, sockaddr in infos:
            address = str(sockaddr[0])
            self.dialed.append(address)
            if ipaddress.ip_address(address).is_loopback:
                return await self._real.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
        raise httpcore.ConnectError("unreachable from this test")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError(f"no unix sockets in this test ({path})")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
