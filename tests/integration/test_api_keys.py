"""API keys over real HTTP: who may call, and that one tenant never sees another's jobs."""

from __future__ import annotations

import asyncio
import hashlib

import asyncpg
import httpx
import pytest

from jobstream import cli, tenants
from jobstream.server.app import create_app
from jobstream.settings import Settings
from tests.support.api import PROBLEM, create
from tests.support.http_server import http_client, serve
from tests.support.sse_client import read_stream

JOB = {"prompt": "count", "simulate": {"tokens": 5}}


async def keyed(base_url: str, key: str) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {key}"}
    return http_client(base_url=base_url, timeout=30, headers=headers)


def assert_401(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["content-type"] == PROBLEM
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json()["status"] == 401


@pytest.mark.parametrize("required", [True, False])
@pytest.mark.parametrize("header", ["Bearer js_unknown", "Bearer", "Basic dXNlcjpwdw==", "js_x"])
async def test_an_unknown_or_malformed_key_is_401_whatever_the_setting(
    settings: Settings, required: bool, header: str
) -> None:
    app = create_app(settings.replace(require_api_key=required))
    async with serve(app) as url, http_client(base_url=url, timeout=30) as http:
        headers = {"Authorization": header}
        assert_401(await http.get("/api/jobs", headers=headers))
        assert_401(await http.post("/api/jobs", json=JOB, headers=headers))


async def test_no_key_is_401_when_required_except_health_and_page(
    anonymous: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    assert_401(await anonymous.get("/api/jobs"))
    # Refused before the body is read: no job, and no hint from validation either.
    assert_401(await anonymous.post("/api/jobs", json={"prompt": ""}))
    assert_401(await anonymous.get("/api/jobs/00000000-0000-0000-0000-000000000000"))
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0
    for path in ("/healthz", "/readyz", "/", "/static/app.js"):
        assert (await anonymous.get(path)).status_code == 200, path
    # /metrics is every tenant's figures: the operator's key (tests/integration/test_metrics.py).
    assert_401(await anonymous.get("/metrics"))


async def test_no_key_is_the_default_tenant_when_not_required(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    job = await create(client)
    assert await pool.fetchval("SELECT tenant_id FROM jobs WHERE id = $1::uuid", job["id"]) == (
        "default"
    )


async def test_a_tenant_never_reaches_another_tenants_job(
    required_url: str, pool: asyncpg.Pool
) -> None:
    key_a = await tenants.create(pool, "tenant-a")
    key_b = await tenants.create(pool, "tenant-b")
    async with await keyed(required_url, key_a) as a, await keyed(required_url, key_b) as b:
        job = await create(a)
        path = f"/api/jobs/{job['id']}"
        assert (await a.get(path)).status_code == 200
        assert (await a.post(f"{path}/retry")).status_code == 409  # A's own, not dead
        for response in (
            await b.get(path),
            await b.post(f"{path}/cancel"),
            await b.post(f"{path}/retry"),
            await b.get(f"{path}/events"),
            await b.get(f"{path}/events", headers={"Accept": "text/event-stream"}),
            # A's token with B's key: the key decides whose view this is.
            await b.get(job["events_url"]),
        ):
            assert response.status_code == 404, response.text
            assert response.headers["content-type"] == PROBLEM
        assert (await b.get("/api/jobs")).json()["jobs"] == []
        assert [j["id"] for j in (await a.get("/api/jobs")).json()["jobs"]] == [job["id"]]
        # B's cancel changed nothing.
        assert (await a.get(path)).json()["status"] == "queued"
        jobs_of = "SELECT tenant_id FROM jobs WHERE id = $1::uuid"
        assert await pool.fetchval(jobs_of, job["id"]) == "tenant-a"


async def test_events_token_without_a_header_reads_that_job_when_keys_are_required(
    required_url: str, anonymous: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    key = await tenants.create(pool, "tenant-a")
    async with await keyed(required_url, key) as a:
        job = await create(a)
        other = await create(a)
        cancelled = await a.post(f"/api/jobs/{job['id']}/cancel")
        assert cancelled.json()["status"] == "cancelled"  # queued: at once, so `done` is logged
    # What a browser's EventSource does: the events_url as given, no header.
    got = await read_stream(anonymous, job["events_url"])
    assert got.status == 200 and got.ended
    assert got.events[-1]["type"] == "done" and got.events[-1]["status"] == "cancelled"
    polled = await anonymous.get(job["events_url"])
    assert polled.status_code == 200 and polled.json()["done"] is True
    # No token: 401. A token of another job: 404, as for any invalid token.
    assert_401(await anonymous.get(f"/api/jobs/{job['id']}/events"))
    wrong = job["events_url"].replace(job["id"], other["id"])
    assert (await anonymous.get(wrong)).status_code == 404
    # The token reads events, nothing else.
    token = job["events_url"].partition("?")[2]
    assert_401(await anonymous.get(f"/api/jobs/{job['id']}?{token}"))
    assert_401(await anonymous.post(f"/api/jobs/{job['id']}/cancel?{token}"))


async def test_only_the_keys_hash_is_stored(pool: asyncpg.Pool) -> None:
    key = await tenants.create(pool, "acme", name="Acme", max_running=2)
    row = await pool.fetchrow("SELECT * FROM tenants WHERE id = 'acme'")
    assert row is not None
    assert row["api_key_hash"] == hashlib.sha256(key.encode()).hexdigest()
    assert row["max_running"] == 2 and row["name"] == "Acme"
    dump = await pool.fetchval("SELECT string_agg(t::text, '|') FROM tenants t")
    assert key not in dump
    assert await tenants.by_key(pool, key) == "acme"
    assert await tenants.by_key(pool, key + "x") is None
    with pytest.raises(tenants.TenantExists):
        await tenants.create(pool, "acme")


async def test_the_tenants_command_prints_a_working_key_once(
    database_url: str,
    pool: asyncpg.Pool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DATABASE_URL", database_url)
    argv = ["create", "acme", "--budget-usd", "2.50", "--max-running", "3"]
    assert await asyncio.to_thread(tenants.main, argv) == 0
    out = capsys.readouterr().out
    key = out.strip()
    assert out == key + "\n" and key.startswith(tenants.KEY_PREFIX)
    assert await tenants.by_key(pool, key) == "acme"
    row = await pool.fetchrow("SELECT budget_usd, max_running FROM tenants WHERE id = 'acme'")
    assert row is not None and (str(row["budget_usd"]), row["max_running"]) == ("2.50000000", 3)
    assert await asyncio.to_thread(tenants.main, ["create", "acme"]) == 1


async def test_the_cli_sends_its_key(
    required_url: str,
    pool: asyncpg.Pool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    key = await tenants.create(pool, "tenant-a")
    async with await keyed(required_url, key) as a:
        job = await create(a)
    get = ["get", job["id"], "--url", required_url, "--json"]
    # cli.main runs its own event loop: in a thread, beside this test's.
    assert await asyncio.to_thread(cli.main, [*get, "--api-key", key]) == cli.EXIT_OK
    assert f'"id":"{job["id"]}"' in capsys.readouterr().out
    monkeypatch.setenv("JOBSTREAM_API_KEY", key)
    assert await asyncio.to_thread(cli.main, get) == cli.EXIT_OK
    capsys.readouterr()
    monkeypatch.delenv("JOBSTREAM_API_KEY")
    assert await asyncio.to_thread(cli.main, get) == cli.EXIT_REFUSED
    assert "401" in capsys.readouterr().err
