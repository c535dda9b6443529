"""Rotating and revoking a tenant's API key, over real HTTP: which keys work, and which
events_url tokens still read their job (the token carries the key generation it was issued
under, checked against the tenant's at every connect).

The end of a rotation's grace is made by moving `previous_key_until` into the past: the server's
own check (`previous_key_until > now()`, the database's clock) then decides, as it would a day
later."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from jobstream import tenants
from jobstream.server.app import create_app
from jobstream.server.key_generations import KeyGenerations
from jobstream.settings import Settings
from tests.support.api import PROBLEM, create
from tests.support.http_server import http_client, serve
from tests.support.sse_client import SSE_HEADERS, read_stream

JOBSTREAM_CLI = str(Path(sys.executable).with_name("jobstream"))


def keyed(base_url: str, key: str) -> httpx.AsyncClient:
    return http_client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {key}"})


async def works(base_url: str, key: str) -> bool:
    """Does the server take this key? (401 is the only other answer a list gives.)"""
    async with keyed(base_url, key) as http:
        response = await http.get("/api/jobs")
    assert response.status_code in (200, 401), response.text
    return response.status_code == 200


async def reads(anonymous: httpx.AsyncClient, events_url: str) -> bool:
    """Does this events_url still read its job, as a long-poll and as a stream? A refusal must
    be a 401 problem, the same on both."""
    polled = await anonymous.get(events_url)
    got = await read_stream(anonymous, events_url, max_events=1)  # the queued job's first event
    assert polled.status_code == got.status, (polled.status_code, got.status)
    if polled.status_code == 200:
        assert got.status == 200 and got.ids == ["1"]
        return True
    assert_refused(polled)
    streamed = await anonymous.get(events_url, headers=SSE_HEADERS)
    assert_refused(streamed)
    return False


def assert_refused(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["content-type"] == PROBLEM
    assert response.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    assert response.json()["status"] == 401


def generation_of(job: dict[str, Any]) -> int:
    token = job["events_url"].partition("token=")[2]
    return int(token.split(".")[0])


async def end_grace(pool: asyncpg.Pool, tenant_id: str) -> None:
    """The rotation's grace is over, as far as the database's clock can tell."""
    await pool.execute(
        "UPDATE tenants SET previous_key_until = now() - interval '1 second' WHERE id = $1",
        tenant_id,
    )


async def test_after_a_rotation_both_keys_work_until_the_grace_ends(
    required_url: str, anonymous: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    old = await tenants.create(pool, "acme")
    async with keyed(required_url, old) as http:
        before = await create(http)
    assert generation_of(before) == 1
    rotated = await tenants.rotate_key(pool, "acme", grace_s=3600)
    assert rotated.key != old and rotated.generation == 2
    assert rotated.previous_until is not None

    # During the grace: both keys, and the page opened before the rotation reads on.
    assert await works(required_url, rotated.key) and await works(required_url, old)
    assert await reads(anonymous, before["events_url"])
    async with keyed(required_url, rotated.key) as http:
        fresh = await create(http)
    async with keyed(required_url, old) as http:
        # A caller still on the old key gets tokens that end with that key.
        on_old = (await http.get(f"/api/jobs/{fresh['id']}")).json()
    assert (generation_of(fresh), generation_of(on_old)) == (2, 1)

    await end_grace(pool, "acme")
    assert not await works(required_url, old)
    assert await works(required_url, rotated.key)
    assert not await reads(anonymous, before["events_url"])
    assert not await reads(anonymous, on_old["events_url"])
    assert await reads(anonymous, fresh["events_url"])


async def test_a_stored_grace_is_the_databases_now_plus_the_grace(pool: asyncpg.Pool) -> None:
    await tenants.create(pool, "acme")
    rotated = await tenants.rotate_key(pool, "acme", grace_s=86_400)
    assert rotated.previous_until is not None
    db_now = await pool.fetchval("SELECT now()")
    assert abs(rotated.previous_until - (db_now + timedelta(days=1))) < timedelta(seconds=30)


async def test_a_revoked_key_and_its_events_tokens_stop_at_once(
    required_url: str, anonymous: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    key = await tenants.create(pool, "acme")
    async with keyed(required_url, key) as http:
        job = await create(http)
    assert await reads(anonymous, job["events_url"])
    assert await tenants.revoke_key(pool, "acme") == 2
    assert not await works(required_url, key)
    assert not await reads(anonymous, job["events_url"])
    row = await pool.fetchrow("SELECT * FROM tenants WHERE id = 'acme'")
    assert row is not None and row["api_key_hash"] is None and row["previous_key_hash"] is None


async def test_a_revocation_ends_a_rotations_grace_too(
    required_url: str, anonymous: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    old = await tenants.create(pool, "acme")
    async with keyed(required_url, old) as http:
        job = await create(http)
    new = (await tenants.rotate_key(pool, "acme", grace_s=3600)).key
    async with keyed(required_url, new) as http:
        fresh = await create(http)
    await tenants.revoke_key(pool, "acme")
    for key in (old, new):
        assert not await works(required_url, key)
    for events_url in (job["events_url"], fresh["events_url"]):
        assert not await reads(anonymous, events_url)
    # A key given after a revocation revives no token issued before it.
    newest = (await tenants.rotate_key(pool, "acme", grace_s=3600)).key
    assert await works(required_url, newest)
    assert not await works(required_url, new)
    assert not await reads(anonymous, fresh["events_url"])


async def test_a_rotation_without_grace_stops_the_old_key_and_its_tokens_at_once(
    required_url: str, anonymous: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    old = await tenants.create(pool, "acme")
    async with keyed(required_url, old) as http:
        job = await create(http)
    rotated = await tenants.rotate_key(pool, "acme", grace_s=0)
    assert rotated.previous_until is None
    assert not await works(required_url, old)
    assert not await reads(anonymous, job["events_url"])
    # The page reads the job again, with the new key, and follows it on a fresh events_url.
    async with keyed(required_url, rotated.key) as http:
        again = (await http.get(f"/api/jobs/{job['id']}")).json()
    assert generation_of(again) == 2
    assert await reads(anonymous, again["events_url"])


async def test_tokens_issued_before_generations_live_until_the_first_rotation(
    required_url: str, anonymous: httpx.AsyncClient, pool: asyncpg.Pool, settings: Settings
) -> None:
    """`<expires>.<signature>`, what servers before the upgrade put in events_url: good while the
    tenant's key is at generation 1, then refused, grace or not."""
    key = await tenants.create(pool, "acme")
    async with keyed(required_url, key) as http:
        job = await create(http)
    expires = 4_000_000_000  # far ahead
    message = f"jobstream-events:{job['id']}:{expires}".encode()
    mac = hmac.new(settings.secret_key.encode(), message, hashlib.sha256).digest()
    legacy = f"/api/jobs/{job['id']}/events?token={expires}." + (
        base64.urlsafe_b64encode(mac).decode().rstrip("=")
    )
    assert await reads(anonymous, legacy)
    await tenants.rotate_key(pool, "acme", grace_s=3600)
    assert not await reads(anonymous, legacy)
    assert await reads(anonymous, job["events_url"])  # a generation-1 token of today's format


async def test_the_default_tenants_tokens_follow_its_generation(
    settings: Settings, pool: asyncpg.Pool
) -> None:
    """Keys off: no key to look up, so the server reads the default tenant's generation (kept
    a second per process)."""
    async with serve(create_app(settings)) as base_url, http_client(base_url, timeout=30) as http:
        job = await create(http)
    assert generation_of(job) == 1
    await tenants.revoke_key(pool, "default")
    async with serve(create_app(settings)) as base_url, http_client(base_url, timeout=30) as http:
        assert not await reads(http, job["events_url"])
        again = (await http.get(f"/api/jobs/{job['id']}")).json()
        assert generation_of(again) == 2
        assert await reads(http, again["events_url"])


async def test_a_tenants_generation_is_read_at_most_once_a_second(pool: asyncpg.Pool) -> None:
    now = [100.0]
    generations = KeyGenerations(now=lambda: now[0])
    assert await generations.of(pool, "default") == 1
    await tenants.revoke_key(pool, "default")
    now[0] += 0.9
    assert await generations.of(pool, "default") == 1  # kept
    now[0] += 0.1
    assert await generations.of(pool, "default") == 2  # a second old: read again


async def test_unknown_tenants_are_refused(pool: asyncpg.Pool) -> None:
    with pytest.raises(tenants.UnknownTenant):
        await tenants.rotate_key(pool, "nobody", grace_s=0)
    with pytest.raises(tenants.UnknownTenant):
        await tenants.revoke_key(pool, "nobody")


# The console command, in a process of its own, against the test's database.


async def run_cli(database_url: str, *args: str, **env: str) -> tuple[int, str, str]:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSTREAM_")}
    child_env |= {"DATABASE_URL": database_url, **env}
    process = await asyncio.create_subprocess_exec(
        *args, env=child_env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def tenants_cli(database_url: str, *args: str, **env: str) -> tuple[int, str, str]:
    return await run_cli(database_url, JOBSTREAM_CLI, "tenants", *args, **env)


def one_key(out: str) -> str:
    """stdout holds the key and nothing else, so `KEY=$(jobstream tenants ...)` works."""
    key = out.strip()
    assert out == key + "\n" and key.startswith(tenants.KEY_PREFIX), out
    return key


async def test_the_command_rotates_and_revokes(
    database_url: str, required_url: str, pool: asyncpg.Pool
) -> None:
    code, out, err = await tenants_cli(database_url, "create", "acme")
    assert code == 0, err
    old = one_key(out)
    code, out, err = await tenants_cli(database_url, "rotate-key", "acme")
    assert code == 0, err
    new = one_key(out)
    assert new != old and "generation 2" in err and "the old key works until" in err
    assert new not in err  # shown once, on stdout
    assert await works(required_url, new) and await works(
        required_url, old
    )  # JOBSTREAM_KEY_GRACE_S: a day
    until = await pool.fetchval("SELECT previous_key_until - now() FROM tenants WHERE id = 'acme'")
    assert timedelta(hours=23) < until <= timedelta(days=1)

    code, out, err = await tenants_cli(
        database_url, "rotate-key", "acme", JOBSTREAM_KEY_GRACE_S="0"
    )
    assert code == 0, err
    newest = one_key(out)
    assert "no other key works" in err
    assert await works(required_url, newest)
    assert not await works(required_url, new) and not await works(required_url, old)

    code, out, err = await tenants_cli(database_url, "revoke-key", "acme")
    assert (code, out) == (0, "") and "revoked" in err
    assert not await works(required_url, newest)
    assert await pool.fetchval("SELECT key_generation FROM tenants WHERE id = 'acme'") == 4

    code, out, err = await tenants_cli(database_url, "rotate-key", "nobody")
    assert (code, out) == (1, "") and "no tenant 'nobody'" in err


async def test_python_dash_m_tenants_still_works(
    database_url: str, required_url: str, pool: asyncpg.Pool
) -> None:
    await tenants.create(pool, "acme")
    code, out, err = await run_cli(
        database_url, sys.executable, "-m", "jobstream.tenants", "rotate-key", "acme",
        "--grace-s", "0",
    )  # fmt: skip
    assert code == 0, err
    assert await works(required_url, one_key(out))
