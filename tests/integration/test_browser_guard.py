"""What a browser may be made to send, over real HTTP: another site's requests while API keys
are off, a DNS-rebound Host, and the security headers of every answer (server/browser_guard.py,
server/security_headers.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import httpx
import orjson
import pytest

from jobstream import tenants
from jobstream.server.app import create_app
from jobstream.settings import Settings
from tests.support.api import PROBLEM, create, job_body, job_count
from tests.support.http_server import http_client, serve

EVIL = "http://evil.example"


@pytest.fixture
async def keyed_url(settings: Settings) -> AsyncIterator[str]:
    """A server with JOBSTREAM_REQUIRE_API_KEY on."""
    async with serve(create_app(settings.replace(require_api_key=True))) as url:
        yield url


async def status_of(pool: asyncpg.Pool, job_id: str) -> str:
    status: str = await pool.fetchval("SELECT status::text FROM jobs WHERE id = $1::uuid", job_id)
    return status


def assert_problem(response: httpx.Response, status: int, slug: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["type"] == f"/problems/{slug}"


async def test_a_cross_origin_cancel_is_refused_and_the_job_is_not_cancelled(
    client: httpx.AsyncClient, pool: asyncpg.Pool, base_url: str
) -> None:
    job = await create(client)  # no worker runs: it stays queued
    refused = await client.post(job["cancel_url"], headers={"Origin": EVIL})
    assert_problem(refused, 403, "cross-origin")
    assert await status_of(pool, job["id"]) == "queued"
    # `Origin: null` (a sandboxed frame, a file:// page) names no origin: refused too.
    assert_problem(
        await client.post(job["cancel_url"], headers={"Origin": "null"}), 403, "cross-origin"
    )
    # The page's own cancel, same origin, as the browser sends it: no body, no Content-Type.
    allowed = await client.post(job["cancel_url"], headers={"Origin": base_url})
    assert allowed.status_code in (200, 202), allowed.text
    assert await status_of(pool, job["id"]) == "cancelled"


async def test_a_cross_origin_read_or_create_is_refused_too(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    headers = {"Origin": EVIL}
    assert_problem(await client.get("/api/jobs", headers=headers), 403, "cross-origin")
    created = await client.post("/api/jobs", json=job_body(), headers=headers)
    assert_problem(created, 403, "cross-origin")
    # The same host on another port is another origin.
    port = client.base_url.port
    assert port is not None
    other_port = {"Origin": f"http://127.0.0.1:{port + 1}"}
    assert_problem(
        await client.post("/api/jobs", json=job_body(), headers=other_port), 403, "cross-origin"
    )
    assert await job_count(pool) == 0


@pytest.mark.parametrize(
    "headers",
    [
        {},  # what `curl -d` without -H and a no-CORS fetch of a Blob send
        {"Content-Type": "text/plain"},  # what a page's fetch may send without a preflight
        {"Content-Type": "application/x-www-form-urlencoded"},  # an HTML form
        {"Content-Type": "multipart/form-data; boundary=x"},
    ],
    ids=["none", "text", "form", "multipart"],
)
async def test_a_create_whose_body_is_not_declared_json_is_415_and_makes_no_job(
    client: httpx.AsyncClient, pool: asyncpg.Pool, headers: dict[str, str]
) -> None:
    body = orjson.dumps(job_body())
    assert_problem(
        await client.post("/api/jobs", content=body, headers=headers), 415, "unsupported-media-type"
    )
    batch = orjson.dumps({"jobs": [job_body()]})
    response = await client.post("/api/jobs/batch", content=batch, headers=headers)
    assert_problem(response, 415, "unsupported-media-type")
    # Under /v1 the refusal takes OpenAI's error shape, as every other /v1 error does.
    v1 = await client.post(
        "/v1/responses", content=b'{"input": "hi", "background": true}', headers=headers
    )
    assert v1.status_code == 415
    assert v1.json()["error"]["code"] == "unsupported_media_type"
    assert await job_count(pool) == 0


async def test_a_json_create_and_a_bare_cancel_still_pass(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    job = await create(client)
    # A cancel with no body needs no Content-Type (curl -X POST, the Python client, the page).
    response = await client.post(job["cancel_url"])
    assert response.status_code in (200, 202), response.text
    assert await status_of(pool, job["id"]) == "cancelled"
    typed = await client.post(
        "/api/jobs",
        content=orjson.dumps(job_body()),
        headers={"Content-Type": "application/json; charset=utf-8"},
    )
    assert typed.status_code == 202, typed.text


async def test_with_keys_on_a_keyed_request_from_another_origin_is_not_the_guards_business(
    keyed_url: str, pool: asyncpg.Pool
) -> None:
    """A page cannot add Authorization to a cross-site request without a preflight this server
    never grants: with keys on, the key decides, as for any API client."""
    key = await tenants.create(pool, "acme")
    async with http_client(
        keyed_url, timeout=30, headers={"Authorization": f"Bearer {key}"}
    ) as http:
        created = await http.post(
            "/api/jobs", content=orjson.dumps(job_body()), headers={"Origin": EVIL}
        )
        assert created.status_code == 202, created.text


@pytest.mark.parametrize("keys_on", [False, True])
async def test_a_foreign_host_is_refused_before_any_route(
    settings: Settings, pool: asyncpg.Pool, keys_on: bool
) -> None:
    app = create_app(settings.replace(require_api_key=keys_on))
    async with serve(app) as url, http_client(url, timeout=30) as http:
        rebound = {"Host": "attacker.example"}
        for path in ("/", "/api/jobs", "/metrics", "/openapi.json", "/static/app.js", "/nowhere"):
            assert_problem(await http.get(path, headers=rebound), 400, "host-not-allowed")
        created = await http.post("/api/jobs", json=job_body(), headers=rebound)
        assert_problem(created, 400, "host-not-allowed")
        assert await job_count(pool) == 0
        # Probes by address reach the health checks whatever their Host.
        for path in ("/healthz", "/readyz"):
            assert (await http.get(path, headers=rebound)).status_code == 200, path
        # The loopback names, with any port, are the defaults.
        for host in ("localhost", "localhost:8000", "127.0.0.1:1", "[::1]:8000", "LOCALHOST."):
            assert (await http.get("/", headers={"Host": host})).status_code == 200, host


async def test_allowed_hosts_names_the_public_host_or_any(settings: Settings) -> None:
    public = settings.replace(allowed_hosts="jobs.example.com")
    async with serve(create_app(public)) as url, http_client(url, timeout=30) as http:
        assert (await http.get("/", headers={"Host": "jobs.example.com:443"})).status_code == 200
        # Listed alone, it replaces the loopback names.
        assert_problem(await http.get("/", headers={"Host": "localhost"}), 400, "host-not-allowed")
    anything = settings.replace(allowed_hosts="*")
    async with serve(create_app(anything)) as url, http_client(url, timeout=30) as http:
        assert (await http.get("/", headers={"Host": "attacker.example"})).status_code == 200


async def test_every_answer_carries_the_security_headers_and_no_server_name(
    client: httpx.AsyncClient,
) -> None:
    job = await create(client)
    page = await client.get("/")
    answers = {
        "page": page,
        "job page": await client.get(f"/jobs/{job['id']}"),
        "script": await client.get("/static/app.js"),
        "list": await client.get("/api/jobs"),
        "problem": await client.get("/api/jobs/00000000-0000-0000-0000-000000000000"),
        "refusal": await client.get("/api/jobs", headers={"Origin": EVIL}),
        "metrics": await client.get("/metrics"),
    }
    async with client.stream(
        "GET", job["events_url"], headers={"Accept": "text/event-stream"}
    ) as stream:
        # The answer streams through the headers' middleware: its first frame comes while the
        # job is still queued, long before any end.
        first = await asyncio.wait_for(anext(stream.aiter_lines()), 10)
        assert first
        answers["sse"] = stream
    for name, response in answers.items():
        headers = response.headers
        assert "server" not in headers, name
        assert headers["x-content-type-options"] == "nosniff", name
        assert headers["x-frame-options"] == "DENY", name
        assert headers["referrer-policy"] == "same-origin", name
        assert "frame-ancestors 'none'" in headers["content-security-policy"], name
    assert answers["sse"].headers["content-type"].startswith("text/event-stream")
    for name in ("page", "job page"):
        assert answers[name].headers["content-security-policy"].startswith("default-src 'self'")
    assert answers["list"].headers["content-security-policy"].startswith("default-src 'none'")
