"""The SSRF guard: a webhook URL must not reach into our own network (DESIGN.md §7).

Only globally routable addresses are allowed: an allow-list, since a deny-list of the ranges we
thought of let through the ones we did not (100.64.0.0/10 holds a cloud metadata service,
100.100.100.200). An IPv6 transition form is judged by the IPv4 address it carries traffic to,
so 6to4 `2002:7f00:1::` is loopback. Every address the host resolves to is checked, since one
private address among public ones is enough to be sent there. Redirects are never followed
(worker/webhooks.py), so a public endpoint cannot bounce a delivery inward.

Known gap: httpx resolves the host again when it connects, so a DNS answer that changes between
the check and the request (rebinding) is not caught.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_v4 = ipaddress.IPv4Network
_v6 = ipaddress.IPv6Network

# Every IPv4 range that is not globally routable (the IANA IPv4 special-purpose registry's
# "globally reachable: false" rows, multicast and the reserved 240/4), with what it is.
_V4_NOT_GLOBAL: tuple[tuple[ipaddress.IPv4Network, str], ...] = (
    (_v4("0.0.0.0/8"), "unspecified"),
    (_v4("10.0.0.0/8"), "private"),
    (_v4("100.64.0.0/10"), "shared (carrier-grade NAT)"),
    (_v4("127.0.0.0/8"), "loopback"),
    (_v4("169.254.0.0/16"), "link-local"),  # 169.254.169.254 is the cloud metadata service
    (_v4("172.16.0.0/12"), "private"),
    (_v4("192.0.0.0/24"), "special-purpose"),
    (_v4("192.0.2.0/24"), "documentation"),
    (_v4("192.88.99.0/24"), "6to4 relay anycast"),  # deprecated (RFC 7526): leads to a relay
    (_v4("192.168.0.0/16"), "private"),
    (_v4("198.18.0.0/15"), "benchmarking"),
    (_v4("198.51.100.0/24"), "documentation"),
    (_v4("203.0.113.0/24"), "documentation"),
    (_v4("224.0.0.0/4"), "multicast"),
    (_v4("240.0.0.0/4"), "reserved"),  # and 255.255.255.255, the broadcast address
)

# IPv6 outside 2000::/3 (global unicast) is never global; these name the ranges worth naming.
_V6_GLOBAL_UNICAST = _v6("2000::/3")
_V6_NOT_GLOBAL: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (_v6("::/128"), "unspecified"),
    (_v6("::1/128"), "loopback"),
    (_v6("fe80::/10"), "link-local"),
    (_v6("fec0::/10"), "site-local"),  # deprecated (RFC 3879), still routed by some networks
    (_v6("fc00::/7"), "private"),  # unique local
    (_v6("ff00::/8"), "multicast"),
    # Inside 2000::/3 but not global: protocol assignments (Teredo, 2001::/32, is unwrapped
    # before this is read), documentation.
    (_v6("2001::/23"), "special-purpose"),
    (_v6("2001:db8::/32"), "documentation"),
    (_v6("3fff::/20"), "documentation"),
)

# NAT64: the well-known prefix and the local-use one (RFC 8215), read in the /96 layout that
# DNS64 synthesises: the IPv4 address is the last 32 bits.
_NAT64 = (_v6("64:ff9b::/96"), _v6("64:ff9b:1::/48"))


@dataclass(frozen=True)
class Forbidden:
    """Why an address may not be delivered to."""

    kind: str  # "loopback", "private", ...
    address: IPAddress  # the address judged: for a transition form, the IPv4 address inside
    form: str | None = None  # the transition form it was found in, e.g. "6to4 2002:7f00:1::"

    def __str__(self) -> str:
        where = f"{self.kind} address {self.address}"
        return where if self.form is None else f"{where} (inside {self.form})"


@dataclass(frozen=True)
class Refused:
    """The URL can never be delivered to: give up without sending."""

    reason: str


@dataclass(frozen=True)
class Unresolved:
    """The host did not resolve this time (a resolver outage heals): try again later."""

    reason: str


def forbidden(address: IPAddress) -> Forbidden | None:
    """Why a delivery must not go to `address`, or None when it is globally routable."""
    if isinstance(address, ipaddress.IPv4Address):
        return _forbidden_v4(address, None)
    carried = _carried(address)
    if carried:
        # A transition form goes where its IPv4 addresses go: judge those instead.
        for form, inner in carried:
            verdict = _forbidden_v4(inner, form)
            if verdict is not None:
                return verdict
        return None
    for network, kind in _V6_NOT_GLOBAL:
        if address in network:
            return Forbidden(kind, address)
    if address not in _V6_GLOBAL_UNICAST:
        return Forbidden("non-global", address)
    return None


def _forbidden_v4(address: ipaddress.IPv4Address, form: str | None) -> Forbidden | None:
    for network, kind in _V4_NOT_GLOBAL:
        if address in network:
            return Forbidden(kind, address, form)
    return None


def _carried(address: ipaddress.IPv6Address) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 transition form carries traffic to, each with the form."""
    if address.ipv4_mapped is not None:
        return [(f"IPv4-mapped {address}", address.ipv4_mapped)]
    if address.sixtofour is not None:
        return [(f"6to4 {address}", address.sixtofour)]
    if address.teredo is not None:
        server, client = address.teredo
        # The client's address is where the traffic ends up; the server's is on its way.
        return [(f"Teredo {address}", client), (f"Teredo {address}", server)]
    for prefix in _NAT64:
        if address in prefix:
            low = int(address) & 0xFFFF_FFFF
            return [(f"NAT64 {address}", ipaddress.IPv4Address(low))]
    return []


def literal_address(host: str) -> IPAddress | None:
    """The address `host` names without a DNS lookup, or None when it is a name.

    Besides the usual forms, the resolver reads `127.1`, `0x7f.1` and `2130706433` as IPv4
    (inet_aton's legacy forms), and so does httpx's connect: they count as literals too.
    """
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])  # drop an IPv6 zone id
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except (OSError, UnicodeError):
        return None


def url_refusal(url: str, *, allow_private: bool) -> str | None:
    """Why `url` cannot be a webhook target, judged without a DNS lookup; None when it may be.

    For create-time validation: a URL with no host, or naming a forbidden address outright
    (unless `allow_private`). A host name is judged later, by `check`, when it is resolved.
    """
    try:
        host = urlsplit(url).hostname
    except ValueError as exc:
        return f"is not a valid URL: {exc}"
    if not host:
        return "has no host"
    address = None if allow_private else literal_address(host)
    verdict = None if address is None else forbidden(address)
    return None if verdict is None else f"must reach a public address; {verdict} is not"


async def check(url: str, *, timeout_s: float) -> Refused | Unresolved | None:
    """Whether `url` may be delivered to now: None when it may.

    A host that does not resolve (or not within `timeout_s`: the lookup runs in a thread that
    cannot be cancelled, so we stop waiting for it) is Unresolved, to be retried.
    """
    try:
        host = urlsplit(url).hostname
    except ValueError as exc:
        return Refused(f"webhook URL is not valid: {exc}")
    if not host:
        return Refused(f"webhook URL has no host: {url!r}")
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout_s):
            infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except TimeoutError:
        return Unresolved(f"webhook host {host!r} did not resolve within {timeout_s:g} s")
    except UnicodeError as exc:
        # Not a DNS name at all (an empty or over-long label): no resolver will ever answer.
        return Refused(f"webhook host {host!r} is not a valid host name: {exc}")
    except OSError as exc:
        return Unresolved(f"webhook host {host!r} does not resolve: {exc}")
    for *_, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        verdict = forbidden(address)
        if verdict is not None:
            return Refused(
                f"refused: webhook host {host!r} resolves to {verdict} "
                "(JOBSTREAM_WEBHOOK_ALLOW_PRIVATE=true allows it)"
            )
    return None
