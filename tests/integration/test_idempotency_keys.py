"""Idempotency keys over their whole life: compared by what the client sent, remembered by the
tombstone after retention deletes their job, and never a 500 when their job is deleted while a
replay reads it. Also the create limits every tenant has by default: a storage bound and a
create rate. The key's first life (same body, same job; another body, 409): test_api_jobs.py."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import httpx
import pytest

from jobstream import creates, jobs
from jobstream.new_jobs import Created, NewJob
from jobstream.server import job_body
from jobstream.server.app import create_app
from jobstream.server.simulated_rules import SimulatedRules
from jobstream.settings import Settings
from tests.support import attempt_driver as drive
from tests.support.api import PROBLEM, job_count
from tests.support.http_server import http_client, serve

RULES = SimulatedRules(enabled=True, max_s=60.0)


async def test_a_replay_after_an_upgrade_changed_a_default_is_the_same_job(
    client: httpx.AsyncClient, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key's hash is of the body as sent: a default the server fills in (a release that
    raised timeout_s's) is not part of it. It was, and the replay was a 409."""
    headers = {"Idempotency-Key": f"upgrade-{uuid.uuid4()}"}
    body = {"prompt": "summarise", "simulate": {"tokens": 2}}
    first = await client.post("/api/jobs", json=body, headers=headers)
    assert first.status_code == 202
    monkeypatch.setattr(job_body, "DEFAULT_TIMEOUT_S", 90.0)  # the next release's default
    again = await client.post("/api/jobs", json=body, headers=headers)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]
    # The body still decides: another one is a conflict.
    other = await client.post("/api/jobs", json={**body, "timeout_s": 90}, headers=headers)
    assert other.status_code == 409 and other.json()["type"] == "/problems/idempotency-conflict"
    assert await job_count(pool) == 1


async def test_a_replay_of_a_job_made_before_sent_hashes_still_matches(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    """A job whose stored hash is of its spec (schema version 14 and before) is compared as
    it was then, so an upgrade turns no pending replay into a 409."""
    headers = {"Idempotency-Key": f"legacy-{uuid.uuid4()}"}
    body = {"prompt": "old", "simulate": {"tokens": 1}}
    first = (await client.post("/api/jobs", json=body, headers=headers)).json()
    spec = job_body.checked_spec(body, default_provider="simulated", simulated=RULES)
    await pool.execute(
        "UPDATE jobs SET request_hash = $2 WHERE id = $1", uuid.UUID(first["id"]),
        spec.request_hash(),
    )  # fmt: skip
    again = await client.post("/api/jobs", json=body, headers=headers)
    assert again.status_code == 200 and again.json()["id"] == first["id"], again.text


RACE_SPEC = job_body.checked_spec({"prompt": "race"}, default_provider="simulated", simulated=RULES)


async def _finished_job_of_key(pool: asyncpg.Pool, key: str) -> Created:
    """A job made with `key` and ended: a job an explicit delete may remove."""
    [first] = await creates.create_many(pool, "default", [NewJob(RACE_SPEC, key)])
    assert isinstance(first, Created)
    held = await drive.claim(pool)
    await drive.succeed(pool, held, "done")
    return first


def _delete_after_the_insert(
    monkeypatch: pytest.MonkeyPatch, pool: asyncpg.Pool, job: Created
) -> list[bool]:
    """Deletes `job` between the next create's insert (which finds its key taken) and the read
    of the key's job; the retry's insert is left alone. Returns what the delete answered."""
    real_insert = creates._insert_chunks
    deleted: list[bool] = []

    async def insert_then_delete(*args: Any, **kwargs: Any) -> None:
        await real_insert(*args, **kwargs)
        monkeypatch.setattr(creates, "_insert_chunks", real_insert)
        deleted.append(await jobs.delete_finished(pool, "default", job.job.id))

    monkeypatch.setattr(creates, "_insert_chunks", insert_then_delete)
    return deleted


async def test_a_key_whose_job_is_deleted_between_insert_and_read_makes_a_new_job(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race that answered 500 ("vanished"): the insert finds the key taken, the job is
    deleted before the replay reads it. The key is free then: the item is made anew."""
    key = f"race-{uuid.uuid4()}"
    first = await _finished_job_of_key(pool, key)
    deleted = _delete_after_the_insert(monkeypatch, pool, first)
    [again] = await creates.create_many(pool, "default", [NewJob(RACE_SPEC, key)])
    assert deleted == [True]
    assert isinstance(again, Created) and again.created and again.job.id != first.job.id
    assert await job_count(pool) == 1


async def test_a_batch_item_whose_keys_job_vanished_is_told_as_a_new_job(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same race in a batch: the item made anew is told to `on_created`, as a server's
    batch builds its answers from it (an item with no answer was a null in the results)."""
    key = f"batch-race-{uuid.uuid4()}"
    first = await _finished_job_of_key(pool, key)
    deleted = _delete_after_the_insert(monkeypatch, pool, first)
    told: dict[int, Created] = {}
    [again] = await creates.create_batch(
        pool, "default", [[NewJob(RACE_SPEC, key)]], on_created=told.__setitem__
    )
    assert deleted == [True]
    assert isinstance(again, Created) and again.created and again.job.id != first.job.id
    assert told == {0: again}


@pytest.fixture
def bounded(settings: Settings) -> Settings:
    return settings.replace(tenant_storage_bytes=4_000)


async def test_a_tenants_storage_bound_refuses_creates_past_it_until_room_is_freed(
    bounded: Settings, pool: asyncpg.Pool
) -> None:
    prompt = "x" * 1_000
    async with serve(create_app(bounded)) as url, http_client(url) as client:
        made: list[dict[str, Any]] = []
        refused = None
        for _ in range(10):
            response = await client.post("/api/jobs", json={"prompt": prompt})
            if response.status_code != 202:
                refused = response
                break
            made.append(response.json())
        assert refused is not None and 2 <= len(made) <= 4, [len(made), refused]
        assert refused.status_code == 403 and refused.headers["content-type"] == PROBLEM
        assert refused.json()["type"] == "/problems/storage-quota-exceeded"
        stored = await pool.fetchval(
            "SELECT sum(stored_bytes) FROM tenant_ledger WHERE tenant_id = 'default'"
        )
        assert len(made) * 1_000 < stored <= 4_000
        # A batch past the bound is refused item by item, and makes nothing.
        batch = await client.post("/api/jobs/batch", json={"jobs": [{"prompt": prompt}] * 3})
        assert [item["type"] for item in batch.json()["results"]] == [
            "/problems/storage-quota-exceeded"
        ] * 3, batch.text
        assert await job_count(pool) == len(made)
        # Deleting a finished job frees what it stored.
        held = await drive.claim(pool)
        await drive.succeed(pool, held, "done")
        assert await jobs.delete_finished(pool, "default", held.job_id) is True
        assert (await client.post("/api/jobs", json={"prompt": prompt})).status_code == 202


async def test_the_default_create_rate_answers_429_with_retry_after(
    settings: Settings, pool: asyncpg.Pool
) -> None:
    slow = settings.replace(tenant_create_rate=0.5, tenant_create_burst=3)
    async with serve(create_app(slow)) as url, http_client(url) as client:
        codes = [
            (await client.post("/api/jobs", json={"prompt": "p"})).status_code for _ in range(3)
        ]
        assert codes == [202] * 3
        refused = await client.post("/api/jobs", json={"prompt": "p"})
        assert refused.status_code == 429 and refused.json()["type"] == "/problems/rate-limited"
        assert 1 <= int(refused.headers["retry-after"]) <= 2
        # A batch larger than the burst could never pass: refused whole.
        batch = await client.post("/api/jobs/batch", json={"jobs": [{"prompt": "p"}] * 4})
        assert batch.status_code == 429
    assert await job_count(pool) == 3
