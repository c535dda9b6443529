"""Who reaches /admin/api/*: an operator's key, or with keys off and no operator key a loopback
client; never a tenant's key, never a client from another address (server/admin_auth.py).

Each route is asked on a real uvicorn. The client from another address is real too: the server
binds every address and the client connects to this host's own non-loopback address, so the
server sees a client that is not 127.0.0.0/8 (where the host has none, that test is skipped and
test_the_decision_on_a_scope_from_another_address holds the same decision on the ASGI scope).
"""

from __future__ import annotations

import socket
import uuid
from typing import Any

import asyncpg
import httpx
import pytest
from starlette.requests import Request

from jobstream import tenants
from jobstream.server import admin_auth
from jobstream.server.app import create_app
from jobstream.server.problems import Problem
from jobstream.settings import Settings
from tests.support.http_server import http_client, serve

OPERATOR = "operator-key-for-tests"


def routes(job_id: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    """Every /admin/api route, with a request that an operator gets a 2xx (or a 409) for."""
    return [
        ("GET", "/admin/api/overview", None),
        ("GET", "/admin/api/jobs?status=queued&limit=5", None),
        ("GET", f"/admin/api/jobs/{job_id}", None),
        ("POST", f"/admin/api/jobs/{job_id}/retry", None),  # queued: 409, past the door
        ("POST", f"/admin/api/jobs/{job_id}/cancel", None),
        ("GET", "/admin/api/dead", None),
        ("POST", "/admin/api/dead/retry", {"ids": [job_id]}),
        ("GET", "/admin/api/workers", None),
    ]


ROUTE_NAMES = [f"{method} {path.split('?')[0]}" for method, path, _ in routes("{id}")]


async def _ask(
    http: httpx.AsyncClient, method: str, path: str, body: dict[str, Any] | None, key: str | None
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    return await http.request(method, path, json=body, headers=headers)


def _problem(response: httpx.Response, status: int) -> None:
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"] == "application/problem+json"


async def _queued_job(http: httpx.AsyncClient, key: str | None = None) -> str:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"prompt": "admin", "delay_s": 3600}
    created = await http.post("/api/jobs", json=body, headers=headers)
    assert created.status_code == 202, created.text
    job_id: str = created.json()["id"]
    return job_id


@pytest.mark.parametrize("route", range(len(ROUTE_NAMES)), ids=ROUTE_NAMES)
async def test_with_keys_on_only_the_operators_key_passes(
    settings: Settings, pool: asyncpg.Pool, route: int
) -> None:
    tenant_key = await tenants.create(pool, "tenant-a")
    app = create_app(settings.replace(require_api_key=True, admin_key=OPERATOR))
    async with serve(app) as url, http_client(url, timeout=30) as http:
        job_id = await _queued_job(http, tenant_key)
        method, path, body = routes(job_id)[route]
        _problem(await _ask(http, method, path, body, tenant_key), 401)  # a tenant's key
        _problem(await _ask(http, method, path, body, None), 401)  # no key
        _problem(await _ask(http, method, path, body, OPERATOR + "x"), 401)  # a wrong key
        answered = await _ask(http, method, path, body, OPERATOR)
        assert answered.status_code in (200, 202, 409), answered.text
        # The refused cancels changed nothing: the operator's found the job queued.
        if path.endswith("/cancel"):
            assert answered.json()["status"] == "cancelled"


@pytest.mark.parametrize("route", range(len(ROUTE_NAMES)), ids=ROUTE_NAMES)
async def test_with_keys_on_and_no_operator_key_every_route_is_refused(
    settings: Settings, pool: asyncpg.Pool, route: int
) -> None:
    tenant_key = await tenants.create(pool, "tenant-a")
    app = create_app(settings.replace(require_api_key=True))
    async with serve(app) as url, http_client(url, timeout=30) as http:
        job_id = await _queued_job(http, tenant_key)
        method, path, body = routes(job_id)[route]
        _problem(await _ask(http, method, path, body, tenant_key), 401)
        _problem(await _ask(http, method, path, body, None), 401)


def _non_loopback_address() -> str | None:
    """This host's address on its default route, if it has one: a UDP socket's connect picks
    it and sends nothing."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.254", 9))  # TEST-NET-1: routed by the default route, if any
        address: str = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


@pytest.mark.parametrize("route", range(len(ROUTE_NAMES)), ids=ROUTE_NAMES)
async def test_with_keys_off_loopback_passes_and_another_address_or_a_key_is_refused(
    settings: Settings, pool: asyncpg.Pool, route: int
) -> None:
    outside = _non_loopback_address()
    if outside is None:
        pytest.skip("this host has no non-loopback address")
    tenant_key = await tenants.create(pool, "tenant-a")
    # Any Host: the browser guard's check of it is not what this test is about.
    app = create_app(settings.replace(allowed_hosts="*"))
    async with serve(app, bind="0.0.0.0") as url:
        port = url.rsplit(":", 1)[1]
        async with (
            http_client(url, timeout=30) as local,
            http_client(f"http://{outside}:{port}", timeout=30) as remote,
        ):
            job_id = await _queued_job(local)
            method, path, body = routes(job_id)[route]
            refused = await _ask(remote, method, path, body, None)
            _problem(refused, 403)
            assert refused.json()["type"] == "/problems/admin-loopback-only"
            _problem(await _ask(remote, method, path, body, tenant_key), 401)
            _problem(await _ask(local, method, path, body, tenant_key), 401)
            answered = await _ask(local, method, path, body, None)
            assert answered.status_code in (200, 202, 409), answered.text


async def test_with_keys_off_an_operator_key_is_required_from_loopback_too(
    settings: Settings,
) -> None:
    app = create_app(settings.replace(admin_key=OPERATOR))
    async with serve(app) as url, http_client(url, timeout=30) as http:
        _problem(await http.get("/admin/api/overview"), 401)
        ok = await http.get("/admin/api/overview", headers={"Authorization": f"Bearer {OPERATOR}"})
        assert ok.status_code == 200, ok.text


@pytest.mark.parametrize(
    ("client", "allowed"),
    [
        (("127.0.0.1", 5000), True),
        (("127.8.9.10", 5000), True),
        (("::1", 5000), True),
        (("::ffff:127.0.0.1", 5000), True),
        (("10.0.0.7", 5000), False),
        (("192.0.2.2", 5000), False),
        (("::ffff:10.0.0.7", 5000), False),
        (None, False),
    ],
)
def test_the_decision_on_a_scope_from_another_address(
    client: tuple[str, int] | None, allowed: bool
) -> None:
    settings = Settings(database_url="postgresql://nobody@127.0.0.1:1/none")
    scope = {"type": "http", "method": "GET", "path": "/admin/api/overview", "headers": []}
    request = Request({**scope, "client": client})
    if allowed:
        admin_auth.authorize(request, settings)
    else:
        with pytest.raises(Problem) as refused:
            admin_auth.authorize(request, settings)
        assert refused.value.status == 403


async def test_an_unknown_job_is_a_404_problem(client: httpx.AsyncClient) -> None:
    missing = uuid.uuid4()
    for method, path in [
        ("GET", f"/admin/api/jobs/{missing}"),
        ("POST", f"/admin/api/jobs/{missing}/cancel"),
        ("POST", f"/admin/api/jobs/{missing}/retry"),
        ("GET", "/admin/api/jobs/not-an-id"),
    ]:
        _problem(await client.request(method, path), 404)
