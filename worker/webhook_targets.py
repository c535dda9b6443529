"""The SSRF guard: a webhook URL must not reach into our own network (docs/design.md, "Webhooks").

Only globally routable addresses are allowed: an allow-list, since a deny-list of the ranges we
thought of let through the ones we did not (100.64.0.0/10 holds a cloud metadata service,
100.100.100.200). An IPv6 transition form is judged by the IPv4 address it carries traffic to,
so 6to4 `2002:7f00:1::` is loopback. Every address the host resolves to is checked, since one
private address among public ones is enough to be sent there. Redirects are never followed
(worker/webhooks.py), so a public endpoint cannot bounce a delivery inward.

The host is resolved once, and the delivery connects to the very addresses checked
(worker/webhook_transport.py): a second lookup by the HTTP client could get another answer
(DNS rebinding: public for the check, 127.0.0.1 for the connect). Before any lookup, the host
is read as a resolver would read it (`normal_host`): written in full-width digits or letters,
with ideographic full stops, or as one octal or hex number, 127.0.0.1 and localhost are refused
as plainly as `http://127.0.0.1/`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import unicodedata
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import idna

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
class Allowed:
    """The URL may be delivered to, at these addresses only: its host's every answer, checked."""

    host: str  # as the HTTP client connects to it: httpx's raw host (IDNA-encoded)
    addresses: tuple[IPAddress, ...]


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
    except (OSError, ValueError):  # ValueError: a NUL; UnicodeError (one) for non-ASCII
        return None


# A full stop that resolvers and URL parsers read as "." (UTS 46): NFKC folds the full-width
# U+FF0E into ".", and the half-width U+FF61 only as far as this one.
_IDEOGRAPHIC_FULL_STOP = str.maketrans({"\u3002": "."})


def normal_host(host: str) -> str:
    """`host` as a resolver reads it: compatibility forms folded (NFKC: full-width letters and
    digits), ideographic full stops as dots, lower case, no root dot, a Unicode name as its IDNA
    A-label. Raises UnicodeError (idna.IDNAError) for a name IDNA refuses."""
    folded = unicodedata.normalize("NFKC", host).translate(_IDEOGRAPHIC_FULL_STOP).lower()
    folded = folded.removesuffix(".")  # "localhost." is "localhost", fully qualified
    if folded.isascii():
        return folded
    return idna.encode(folded, uts46=True).decode("ascii")


def _named_refusal(host: str) -> str | None:
    """What forbidden place the normalised `host` names without a lookup, or None."""
    address = literal_address(host)
    if address is not None:
        verdict = forbidden(address)
        return None if verdict is None else str(verdict)
    if host == "localhost" or host.endswith(".localhost"):
        return f"loopback name {host}"  # RFC 6761: resolvers answer it with loopback
    return None


def _hosts(url: str) -> tuple[str, ...] | str:
    """The URL's host, normalised, as each parser that reads it sees it (urllib's; httpx's, which
    the delivery uses, when it can parse the URL); or why there is none."""
    try:
        host = urlsplit(url).hostname
    except ValueError as exc:
        return f"is not a valid URL: {exc}"
    if not host:
        return "has no host"
    seen = [host]
    with contextlib.suppress(httpx.InvalidURL):  # said after a forbidden host is named
        seen.append(httpx.URL(url).raw_host.decode("ascii"))
    try:
        return tuple(dict.fromkeys(normal_host(h) for h in seen))
    except UnicodeError as exc:
        return f"has a host that is not a valid host name: {exc}"


def url_refusal(url: str, *, allow_private: bool) -> str | None:
    """Why `url` cannot be a webhook target, judged without a DNS lookup; None when it may be.

    For create-time validation: a URL with no usable host, one httpx cannot send to, or one whose
    host names a forbidden address or localhost outright, in any spelling (unless
    `allow_private`). Any other host name is judged later, by `check`, when it is resolved.
    """
    hosts = _hosts(url)
    if isinstance(hosts, str):
        return hosts
    for host in () if allow_private else hosts:
        named = _named_refusal(host)
        if named is not None:
            return f"must reach a public address; {named} is not"
    try:
        httpx.URL(url)
    except httpx.InvalidURL as exc:
        return f"is not a valid URL: {exc}"
    return None


Resolve = Callable[[str], Awaitable[Sequence[str]]]
"""A host name's addresses, as text; raises OSError when it does not resolve."""


async def system_resolve(host: str) -> list[str]:
    """The event loop's getaddrinfo: what httpx would have asked when it connects."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return [str(sockaddr[0]) for *_, sockaddr in infos]


_ALLOW_HINT = "JOBSTREAM_WEBHOOK_ALLOW_PRIVATE=true allows it"


async def check(
    url: str, *, timeout_s: float, resolve: Resolve = system_resolve
) -> Allowed | Refused | Unresolved:
    """Whether `url` may be delivered to now, and if so at which addresses: all the host's
    answers, resolved once by `resolve`. One forbidden answer among public ones refuses the name
    whole: the connect might have picked it.

    A host that does not resolve (or not within `timeout_s`: the default lookup runs in a thread
    that cannot be cancelled, so we stop waiting for it) is Unresolved, to be retried.
    """
    hosts = _hosts(url)
    if isinstance(hosts, str):
        return Refused(f"webhook URL {hosts}: {url!r}")
    for host in hosts:
        named = _named_refusal(host)
        if named is not None:
            return Refused(f"refused: webhook host {host!r} is {named} ({_ALLOW_HINT})")
    try:
        # The host exactly as httpx connects to it: the pin is keyed on it.
        host = httpx.URL(url).raw_host.decode("ascii")
    except httpx.InvalidURL as exc:
        return Refused(f"webhook URL is not valid: {exc}")
    address = literal_address(host)
    if address is not None:
        return Allowed(host, (address,))  # a literal: judged above, nothing to look up
    try:
        async with asyncio.timeout(timeout_s):
            answers = await resolve(host)
    except TimeoutError:
        return Unresolved(f"webhook host {host!r} did not resolve within {timeout_s:g} s")
    except UnicodeError as exc:
        # Not a DNS name at all (an empty or over-long label): no resolver will ever answer.
        return Refused(f"webhook host {host!r} is not a valid host name: {exc}")
    except OSError as exc:
        return Unresolved(f"webhook host {host!r} does not resolve: {exc}")
    try:
        addresses = tuple(dict.fromkeys(ipaddress.ip_address(a.split("%", 1)[0]) for a in answers))
    except ValueError as exc:
        return Unresolved(f"webhook host {host!r} resolved to no address: {exc}")
    if not addresses:
        return Unresolved(f"webhook host {host!r} resolved to no address")
    for address in addresses:
        verdict = forbidden(address)
        if verdict is not None:
            among = "" if len(addresses) == 1 else f", one of its {len(addresses)} addresses"
            return Refused(
                f"refused: webhook host {host!r} resolves to {verdict}{among} ({_ALLOW_HINT})"
            )
    return Allowed(host, addresses)
