"""Webhook hosts: resolved once and connected to at the checked address (no DNS rebinding), a
name with any forbidden answer refused whole, the URL's host kept for `Host` and TLS, and a
forbidden host refused at create however it is spelled."""

from __future__ import annotations

import ipaddress
import random
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from jobstream.settings import Settings
from jobstream.worker import webhook_transport
from jobstream.worker.webhook_targets import Allowed
from jobstream.worker.webhooks import WebhookSender
from tests.support.api import PROBLEM, job_count
from tests.support.http_server import serve
from tests.support.outside import LoopbackOnly
from tests.support.resolver import Resolver, fake_resolver
from tests.support.webhook_outbox import pending_delivery, the_delivery
from tests.support.webhook_receiver import webhook_receiver
from tests.support.workers import manual_clock

HOST = "hooks.example.com"
PUBLIC = "93.184.216.34"  # globally routable, so the check allows it; unreachable in these tests
LOOPBACK = "127.0.0.1"


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Resolver]:
    with fake_resolver(monkeypatch) as fake:
        yield fake


@pytest.fixture
def strict(hook_settings: Settings) -> Settings:
    return hook_settings.replace(webhook_allow_private=False, webhook_timeout_s=5.0)


def at_host(receiver_url: str) -> str:
    """The receiver's URL with HOST for its address: the loopback port stands in for the inside."""
    return receiver_url.replace(f"//{LOOPBACK}:", f"//{HOST}:")


async def test_a_name_that_rebinds_to_loopback_after_the_check_sends_nothing_inside(
    pool: asyncpg.Pool, strict: Settings, resolver: Resolver
) -> None:
    # The DNS answers public for the first lookup and loopback for every later one: a second
    # lookup, by anyone (the process's resolver is the script), would lead to the listener.
    resolver.answers[HOST] = [[PUBLIC], [LOOPBACK]]
    network = LoopbackOnly()
    clock = manual_clock()
    async with webhook_receiver() as receiver:
        job_id = await pending_delivery(pool, at_host(receiver.url), clock)
        webhooks = WebhookSender(pool, strict, clock=clock, rng=random.Random(9), network=network)
        async with webhooks.client() as http:
            assert await webhooks.deliver_due(http) == 1
    assert receiver.requests == []
    assert resolver.lookups.count(HOST) == 1
    assert network.dialed == [PUBLIC]  # the checked address, not a fresh answer
    row = await the_delivery(pool, job_id)
    assert (row["status"], row["attempts"], row["last_status_code"]) == ("pending", 1, None)
    assert row["last_error"] == (
        f"ConnectError: {HOST} did not connect at {PUBLIC}: unreachable from this test"
    )


async def test_a_name_answering_public_and_loopback_at_once_is_refused_whole(
    pool: asyncpg.Pool, strict: Settings
) -> None:
    answers = Resolver()  # injected: nothing of the process's is replaced
    answers.answers[HOST] = [[PUBLIC, LOOPBACK]]
    network = LoopbackOnly()
    clock = manual_clock()
    async with webhook_receiver() as receiver:
        job_id = await pending_delivery(pool, at_host(receiver.url), clock)
        webhooks = WebhookSender(
            pool, strict, clock=clock, rng=random.Random(9), resolve=answers.resolve,
            network=network,
        )  # fmt: skip
        async with webhooks.client() as http:
            assert await webhooks.deliver_due(http) == 1
    assert receiver.requests == []
    assert network.dialed == []  # not even the public answer: the name is refused whole
    row = await the_delivery(pool, job_id)
    assert (row["status"], row["attempts"], row["last_status_code"]) == ("failed", 1, None)
    assert row["last_error"] == (
        f"refused: webhook host '{HOST}' resolves to loopback address 127.0.0.1, one of its 2 "
        "addresses (JOBSTREAM_WEBHOOK_ALLOW_PRIVATE=true allows it)"
    )


def pinned_to_loopback(host: str = HOST) -> Allowed:
    """What a check of `host` would allow if it resolved to loopback (allowed here by hand)."""
    return Allowed(host, (ipaddress.ip_address(LOOPBACK),))


async def test_a_pinned_connect_sends_the_urls_host_and_looks_nothing_up(
    resolver: Resolver,
) -> None:
    async with webhook_receiver() as receiver:
        url = at_host(receiver.url)
        async with webhook_transport.client(timeout_s=5, require_pin=True) as http:
            with webhook_transport.pinned(pinned_to_loopback()):
                response = await http.post(url, content=b"{}")
    assert response.status_code == 204
    [received] = receiver.requests
    assert received.headers["host"] == url.split("/")[2]  # hooks.example.com:<port>
    assert resolver.lookups == []


async def test_a_strict_client_refuses_a_connect_nobody_checked(resolver: Resolver) -> None:
    async with (
        webhook_receiver() as receiver,
        webhook_transport.client(timeout_s=5, require_pin=True) as http,
    ):
        with pytest.raises(webhook_transport.Unpinned):
            await http.post(at_host(receiver.url), content=b"{}")
        with (
            webhook_transport.pinned(pinned_to_loopback("other.example.com")),
            pytest.raises(webhook_transport.Unpinned, match="checked host"),
        ):
            await http.post(at_host(receiver.url), content=b"{}")
    assert receiver.requests == []
    assert resolver.lookups == []


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for HOST only, and its key."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", f"/CN={HOST}", "-addext", f"subjectAltName=DNS:{HOST}",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return cert, key


@asynccontextmanager
async def tls_receiver(certificate: tuple[Path, Path]) -> AsyncIterator[int]:
    """A TLS server on loopback answering 204 to any POST, presenting HOST's certificate."""

    async def hook(request: Request) -> Response:
        return Response(status_code=204)

    app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])
    cert, key = certificate
    async with serve(app, ssl_certfile=str(cert), ssl_keyfile=str(key)) as base_url:
        yield int(base_url.rsplit(":", 1)[1])


async def test_tls_to_a_pinned_address_is_verified_against_the_urls_host(
    certificate: tuple[Path, Path], resolver: Resolver
) -> None:
    trusting = ssl.create_default_context(cafile=str(certificate[0]))
    async with (
        tls_receiver(certificate) as port,
        webhook_transport.client(timeout_s=5, require_pin=True, tls=trusting) as http,
    ):
        # SNI and the certificate's check name HOST, though the connect goes to 127.0.0.1.
        with webhook_transport.pinned(pinned_to_loopback()):
            response = await http.post(f"https://{HOST}:{port}/hook", content=b"{}")
        assert response.status_code == 204
        # The same address under another name: its certificate does not match, and is refused.
        with (
            webhook_transport.pinned(pinned_to_loopback("other.example.com")),
            pytest.raises(httpx.ConnectError, match="certificate verify failed"),
        ):
            await http.post(f"https://other.example.com:{port}/hook", content=b"{}")
    assert resolver.lookups == []


async def test_a_forbidden_host_in_any_spelling_is_a_422_at_create(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    for url in (
        "http://\uff11\uff12\uff17.0.0.1/hook",  # full-width digits
        "http://127\u30020\u30020\u30021/hook",  # ideographic full stops
        "http://127\uff0e0\uff0e0\uff0e1/hook",  # full-width full stops
        "http://127\uff610\uff610\uff611/hook",  # half-width ideographic full stops
        "http://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54/hook",  # localhost
        "http://localhost:9/hook",
        "http://api.localhost/hook",
        "http://0x7f000001/hook",  # hex
        "http://0177.0.0.1/hook",  # octal
        "http://017700000001/hook",  # one octal number
        "http://0xa9fea9fe/latest/meta-data/",  # 169.254.169.254
    ):
        response = await client.post("/api/jobs", json={"prompt": "hi", "webhook_url": url})
        assert response.status_code == 422, (url, response.text)
        assert response.headers["content-type"] == PROBLEM
        [error] = response.json()["errors"]
        assert error["field"] == "webhook_url"
        assert error["message"].startswith("must reach a public address"), (url, error)
    assert await job_count(pool) == 0
