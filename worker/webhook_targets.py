"""The SSRF guard: a webhook URL must not reach into our own network (DESIGN.md §7).

Every address the host resolves to is checked, since one private address among public ones is
enough to be sent there. Redirects are never followed (worker/webhooks.py), so a public endpoint
cannot bounce a delivery inward. Known gap: httpx resolves the host again when it connects, so
a DNS answer that changes between the check and the request (rebinding) is not caught.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def forbidden_reason(address: IPAddress) -> str | None:
    """Why a delivery must not go to `address`, or None when it is a public address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 is loopback too
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"  # includes 169.254.169.254, the cloud metadata service
    if address.is_private:
        return "private"
    if address.is_unspecified or address.is_multicast or address.is_reserved:
        return "non-routable"
    return None


async def refusal(url: str) -> str | None:
    """Why `url` may not be delivered to (a clear last_error), or None when it may."""
    host = urlsplit(url).hostname
    if not host:
        return f"webhook URL has no host: {url!r}"
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        return f"webhook host {host!r} does not resolve: {exc}"
    for *_, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])  # drop an IPv6 zone id
        reason = forbidden_reason(address)
        if reason is not None:
            return (
                f"refused: webhook host {host!r} resolves to {reason} address {address} "
                "(JOBSTREAM_WEBHOOK_ALLOW_PRIVATE=true allows it)"
            )
    return None
