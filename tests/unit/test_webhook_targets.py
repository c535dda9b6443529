"""The SSRF guard: only globally routable addresses, judged through IPv6 transition forms; a host
read as a resolver reads it, however it is spelled; every answer of a name checked, one forbidden
answer refusing it whole; a host that does not resolve is retried, never given up."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

import pytest

from jobstream.worker import webhook_targets
from jobstream.worker.webhook_targets import Allowed, Refused, Unresolved
from tests.support.resolver import Resolver, fake_resolver

# A Teredo address (2001::/32) whose server is 65.54.227.120 and whose client, stored inverted
# in the last 32 bits, is 127.0.0.1; and the same with the public client 93.184.216.34.
TEREDO_TO_LOOPBACK = "2001:0:4136:e378:8000:63bf:80ff:fffe"
TEREDO_TO_PUBLIC = "2001:0:4136:e378:8000:63bf:a247:27dd"


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Resolver]:
    with fake_resolver(monkeypatch) as fake:
        yield fake


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.0.10", "private"),
        ("fd00::1", "private"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        # What the deny-list let through (issue 9).
        ("100.100.100.200", "shared (carrier-grade NAT)"),  # a cloud metadata service
        ("100.64.0.1", "shared (carrier-grade NAT)"),
        ("192.88.99.1", "6to4 relay anycast"),
        ("fec0::1", "site-local"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("255.255.255.255", "reserved"),
        ("198.18.0.1", "benchmarking"),
        ("192.0.2.1", "documentation"),
        ("2001:db8::1", "documentation"),
        ("2001:2::1", "special-purpose"),
        ("::7f00:1", "non-global"),  # IPv4-compatible, deprecated
        # Transition forms are judged by the IPv4 address they carry traffic to.
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "link-local"),
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
        ("2002:a9fe:a9fe::1", "link-local"),  # 6to4 of 169.254.169.254
        ("64:ff9b::7f00:1", "loopback"),  # NAT64 of 127.0.0.1
        ("64:ff9b::a9fe:a9fe", "link-local"),
        ("64:ff9b:1::a00:1", "private"),  # local-use NAT64 of 10.0.0.1
        ("64:ff9b:1::6464:64c8", "shared (carrier-grade NAT)"),  # of 100.100.100.200
        (TEREDO_TO_LOOPBACK, "loopback"),
        # Globally routable: allowed, in every form.
        ("93.184.216.34", None),
        ("2606:4700::1111", None),
        ("2002:5db8:d822::", None),
        ("64:ff9b::5db8:d822", None),
        ("::ffff:93.184.216.34", None),
        (TEREDO_TO_PUBLIC, None),
    ],
)
def test_only_globally_routable_addresses_are_allowed(address: str, kind: str | None) -> None:
    verdict = webhook_targets.forbidden(ipaddress.ip_address(address))
    assert (verdict.kind if verdict else None) == kind


def test_a_refusal_names_the_address_inside_a_transition_form() -> None:
    verdict = webhook_targets.forbidden(ipaddress.ip_address("2002:a9fe:a9fe::"))
    assert str(verdict) == "link-local address 169.254.169.254 (inside 6to4 2002:a9fe:a9fe::)"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://[::1]/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://100.100.100.200/latest/meta-data/",
        "http://[2002:a9fe:a9fe::]/hook",
        "http://[64:ff9b::7f00:1]/hook",
        "http://[fec0::1]/hook",
        # The resolver (and so httpx) reads these as 127.0.0.1 too.
        "http://2130706433/hook",
        "http://0x7f.1/hook",
        "http://127.1/hook",
    ],
)
def test_a_forbidden_literal_address_is_refused_without_a_lookup(
    url: str, resolver: Resolver
) -> None:
    refusal = webhook_targets.url_refusal(url, allow_private=False)
    assert refusal is not None and refusal.startswith("must reach a public address")
    assert webhook_targets.url_refusal(url, allow_private=True) is None
    assert resolver.lookups == []


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("http://0x7f000001/hook", "loopback address 127.0.0.1"),
        ("http://0177.0.0.1/hook", "loopback address 127.0.0.1"),  # octal
        ("http://017700000001/hook", "loopback address 127.0.0.1"),
        ("http://0xa9.0xfe.0xa9.0xfe/hook", "link-local address 169.254.169.254"),
        ("http://127.0.0.1./hook", "loopback address 127.0.0.1"),  # the root's dot
        # Full-width digits and letters, ideographic and full-width full stops: read as a
        # resolver or IDNA reads them, they are 127.0.0.1 and localhost.
        ("http://\uff11\uff12\uff17.0.0.1/hook", "loopback address 127.0.0.1"),
        ("http://127\u30020\u30020\u30021/hook", "loopback address 127.0.0.1"),
        ("http://127\uff0e0\uff0e0\uff0e1/hook", "loopback address 127.0.0.1"),
        ("http://127\uff610\uff610\uff611/hook", "loopback address 127.0.0.1"),
        ("http://\uff10\uff58\uff17\uff46.1/hook", "loopback address 127.0.0.1"),  # 0x7f.1
        (
            "http://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54/hook",
            "loopback name localhost",
        ),
        # localhost names: RFC 6761 has resolvers answer them with loopback.
        ("http://localhost:8080/hook", "loopback name localhost"),
        ("http://LocalHost./hook", "loopback name localhost"),
        ("http://api.localhost/hook", "loopback name api.localhost"),
        ("http://\u24dbocalhost/hook", "loopback name localhost"),  # a circled l
    ],
)
def test_a_forbidden_host_in_another_spelling_is_refused_without_a_lookup(
    url: str, named: str, resolver: Resolver
) -> None:
    refusal = webhook_targets.url_refusal(url, allow_private=False)
    assert refusal == f"must reach a public address; {named} is not"
    # Allowed, the host is not refused for where it leads (a spelling httpx cannot send to
    # still is, for that).
    allowed = webhook_targets.url_refusal(url, allow_private=True)
    assert allowed is None or allowed.startswith("is not a valid URL"), allowed
    assert resolver.lookups == []


def test_a_name_or_a_public_address_is_left_to_the_worker(resolver: Resolver) -> None:
    for url in (
        "https://hooks.example.com/x",
        "https://93.184.216.34/x",
        "http://[2606:4700::1]/",
        "https://b\u00fccher.example/x",  # an IDNA name
        "https://localhost.example.com/x",  # not under .localhost
        "https://1572395042/x",  # 93.184.216.34 as one number
    ):
        assert webhook_targets.url_refusal(url, allow_private=False) is None, url
    assert resolver.lookups == []  # a create never waits on DNS


@pytest.mark.parametrize(
    ("host", "normal"),
    [
        ("\uff11\uff12\uff17.0.0.1", "127.0.0.1"),
        ("127\u30020\uff0e0\uff611", "127.0.0.1"),
        ("\uff2c\uff2f\uff23\uff21\uff2c\uff28\uff2f\uff33\uff34.", "localhost"),
        ("B\u00fccher.Example", "xn--bcher-kva.example"),
        ("hooks.example.com", "hooks.example.com"),
    ],
)
def test_a_host_is_read_as_a_resolver_reads_it(host: str, normal: str) -> None:
    assert webhook_targets.normal_host(host) == normal


def test_a_url_httpx_cannot_send_to_is_refused_whatever_the_setting() -> None:
    # Full-width digits in a name httpx would have to IDNA-encode: it refuses the URL.
    url = "http://hooks\uff11.example.com/x"
    for allow_private in (False, True):
        refusal = webhook_targets.url_refusal(url, allow_private=allow_private)
        assert refusal is not None and refusal.startswith("is not a valid URL"), refusal


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://[::1/x", "not a valid URL"),
        ("http://", "host"),
        ("http://\x00/hook", "not a valid URL"),  # once an uncaught error of inet_aton
    ],
)
def test_a_url_without_a_usable_host_is_refused_whatever_the_setting(url: str, why: str) -> None:
    for allow_private in (False, True):
        refusal = webhook_targets.url_refusal(url, allow_private=allow_private)
        assert refusal is not None and why in refusal


async def test_a_url_naming_a_loopback_address_is_refused() -> None:
    verdict = await webhook_targets.check("http://127.0.0.1:9/hook", timeout_s=5)
    assert isinstance(verdict, Refused) and "loopback address 127.0.0.1" in verdict.reason


async def test_a_public_literal_address_is_allowed_without_a_lookup() -> None:
    unused = Resolver()
    verdict = await webhook_targets.check(
        "https://93.184.216.34/hook", timeout_s=5, resolve=unused.resolve
    )
    assert verdict == Allowed("93.184.216.34", (ipaddress.ip_address("93.184.216.34"),))
    assert unused.lookups == []


async def test_a_host_whose_lookup_fails_is_unresolved_not_refused(resolver: Resolver) -> None:
    resolver.failing.add("hooks.example.com")
    verdict = await webhook_targets.check("https://hooks.example.com/x", timeout_s=5)
    assert isinstance(verdict, Unresolved)
    assert "does not resolve" in verdict.reason
    assert resolver.lookups == ["hooks.example.com"]


async def test_a_lookup_that_hangs_is_unresolved_after_the_timeout(resolver: Resolver) -> None:
    resolver.hanging.add("slow.example.com")
    verdict = await webhook_targets.check("https://slow.example.com/x", timeout_s=0.2)
    assert verdict == Unresolved("webhook host 'slow.example.com' did not resolve within 0.2 s")


async def test_a_host_that_is_no_dns_name_is_refused() -> None:
    # A 64-character label: IDNA refuses it before any lookup, and it never will resolve.
    verdict = await webhook_targets.check(f"https://{'a' * 64}.example.com/x", timeout_s=5)
    assert isinstance(verdict, Refused) and "not a valid host name" in verdict.reason


async def test_every_answer_of_a_name_is_checked_and_kept_for_the_connect() -> None:
    resolver = Resolver()
    resolver.answers["hooks.example.com"] = [["93.184.216.34", "2606:4700::1111", "93.184.216.34"]]
    verdict = await webhook_targets.check(
        "https://hooks.example.com/x", timeout_s=5, resolve=resolver.resolve
    )
    addresses = (ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("2606:4700::1111"))
    assert verdict == Allowed("hooks.example.com", addresses)
    assert resolver.lookups == ["hooks.example.com"]  # once: the connect does not ask again


async def test_a_name_with_one_forbidden_answer_among_public_ones_is_refused_whole() -> None:
    resolver = Resolver()
    resolver.answers["hooks.example.com"] = [["93.184.216.34", "127.0.0.1"]]
    verdict = await webhook_targets.check(
        "https://hooks.example.com/x", timeout_s=5, resolve=resolver.resolve
    )
    assert verdict == Refused(
        "refused: webhook host 'hooks.example.com' resolves to loopback address 127.0.0.1, "
        "one of its 2 addresses (JOBSTREAM_WEBHOOK_ALLOW_PRIVATE=true allows it)"
    )


async def test_a_localhost_name_is_refused_before_any_lookup() -> None:
    resolver = Resolver()
    verdict = await webhook_targets.check(
        "http://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54:9/hook",
        timeout_s=5,
        resolve=resolver.resolve,
    )
    assert isinstance(verdict, Refused) and "loopback name localhost" in verdict.reason
    assert resolver.lookups == []


async def test_a_literal_in_another_spelling_is_refused_at_delivery_too() -> None:
    resolver = Resolver()
    for url in ("http://127\u30020\u30020\u30021/hook", "http://0x7f000001/hook"):
        verdict = await webhook_targets.check(url, timeout_s=5, resolve=resolver.resolve)
        assert isinstance(verdict, Refused), url
        assert "loopback address 127.0.0.1" in verdict.reason
    assert resolver.lookups == []
