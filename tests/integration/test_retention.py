"""Retention, compaction and the janitor (jobstream/retention.py, worker/janitor.py), over real
HTTP and PostgreSQL. Time is a ManualClock handed to the janitor: nothing waits for a wall clock.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx

from jobstream import attempts, db, jobs, retention
from jobstream.settings import Settings
from jobstream.worker.janitor import Janitor
from tests.integration.test_metrics import samples
from tests.support import attempt_driver as drive
from tests.support.api import PROBLEM
from tests.support.clock import ManualClock
from tests.support.polling import eventually
from tests.support.sse_client import read_stream, reassemble
from tests.support.workers import (
    counted_text,
    create_job,
    fast,
    running_worker,
    wait_for_job,
    wait_idle,
)

TABLES = ("jobs", "job_attempts", "job_events", "webhook_deliveries", "tenant_jobs")


def plain(job_id: Any) -> str:
    return f"/api/jobs/{job_id}/events"


def later(seconds: float = 0) -> ManualClock:
    """The janitor's clock, `seconds` past the database's now."""
    return ManualClock(datetime.now(UTC) + timedelta(seconds=seconds))


async def rows_of(pool: asyncpg.Pool, job_id: uuid.UUID) -> dict[str, int]:
    found = {}
    for table in TABLES:
        column = "id" if table == "jobs" else "job_id"
        found[table] = await pool.fetchval(
            f"SELECT count(*) FROM {table} WHERE {column} = $1", job_id
        )
    return found


async def retried_job(client: httpx.AsyncClient, pool: asyncpg.Pool) -> uuid.UUID:
    """A job whose attempt 1 wrote 3 token events and failed, and whose attempt 2 wrote ten
    ("0 " to "9 ") and was accepted. Its log: 1 queued, 2-3 opening attempt 1, 4-6 tokens,
    7-8 its error and the requeue, 9-10 opening attempt 2, 11-20 tokens, 21 usage, 22 done."""
    created = await client.post("/api/jobs", json={"prompt": "count", "simulate": {"tokens": 10}})
    job_id = uuid.UUID(created.json()["id"])
    first = await drive.claim(pool)
    for i in range(3):
        await drive.tokens(pool, first, drive.count_tokens(i, i + 1))
    await drive.retry(pool, first)
    second = await drive.claim(pool)
    for i in range(10):
        await drive.tokens(pool, second, drive.count_tokens(i, i + 1))
    await drive.succeed(pool, second, counted_text(10))
    return job_id


async def test_a_compacted_log_reads_from_zero_as_the_result_and_inside_a_range_as_resync(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    job_id = await retried_job(client, pool)
    async with pool.acquire() as conn:
        # Parts of at most 8 characters: the ten tokens of 2 fold into 4 + 4 + 2.
        batch = await retention.settle(
            conn, later(), compact_after_s=0, retention_s=3600, limit=10, compact_chars=8
        )
    assert (batch.jobs, batch.rows) == (1, 2 + 3 + 3 + 1)
    log = await pool.fetch(
        "SELECT seq, type, attempt, data FROM job_log WHERE job_id = $1 ORDER BY seq", job_id
    )
    tokens = [(r["seq"], r["attempt"], r["data"]) for r in log if r["type"] == "token"]
    assert tokens == [
        (6, 1, {"text": "", "from_seq": 4}),  # attempt 1 was superseded: its text goes
        (14, 2, {"text": "0 1 2 3 ", "from_seq": 11}),
        (18, 2, {"text": "4 5 6 7 ", "from_seq": 15}),
        (20, 2, {"text": "8 9 ", "from_seq": 19}),
    ]
    assert [r["seq"] for r in log if r["type"] != "token"] == [1, 2, 3, 7, 8, 9, 10, 21, 22]

    whole = await read_stream(client, plain(job_id))
    assert [e["type"] for e in whole.events].count("resync") == 0
    assert reassemble(whole.events) == counted_text(10) == whole.events[-1]["result"]["text"]
    polled = (await client.get(plain(job_id), params={"after": "0"})).json()
    assert reassemble(polled["events"]) == counted_text(10) and polled["done"]
    # A cursor at the end of a part, or before a folded range, reads on without a resync.
    for cursor, first in ((3, 6), (10, 14), (14, 18)):
        got = await read_stream(client, plain(job_id), last_event_id=str(cursor))
        assert (got.events[0]["type"], got.events[0]["seq"]) == ("token", first), cursor

    for cursor, after in ((12, 14), (15, 18), (5, 6)):
        # Inside a folded range: resync, its id the range's end, then what follows the range.
        got = await read_stream(client, plain(job_id), last_event_id=str(cursor))
        assert got.events[0] == {**got.events[0], "type": "resync", "first_seq": after + 1}
        assert got.ids[0] == str(after)
        assert got.events[1]["seq"] > after and got.events[-1]["type"] == "done"
        polled = (await client.get(plain(job_id), params={"after": str(cursor)})).json()
        assert polled["events"][0]["type"] == "resync"
    # What a client does on resync: the snapshot has the whole text up to last_seq.
    snapshot = (await client.get(f"/api/jobs/{job_id}")).json()
    assert (snapshot["output"]["text"], snapshot["last_seq"]) == (counted_text(10), 22)
    assert snapshot["expires_at"] is not None


async def test_a_failed_jobs_log_keeps_its_last_attempts_text(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    created = await client.post("/api/jobs", json={"prompt": "x", "max_attempts": 1})
    job_id = created.json()["id"]
    held = await drive.claim(pool)
    for i in range(4):
        await drive.tokens(pool, held, drive.count_tokens(i, i + 1))
    error = {"class": "permanent", "message": "simulated 400"}
    await attempts.fail(
        pool, held, action="fail", outcome="failed", error=error, usage=None, retry_in_s=0,
        clock=drive.CLOCK,
    )  # fmt: skip
    before = (await client.get(f"/api/jobs/{job_id}")).json()["output"]["text"]
    async with pool.acquire() as conn:
        await retention.settle(conn, later(), compact_after_s=0, retention_s=60, limit=10)
    after = await client.get(f"/api/jobs/{job_id}")
    assert before == after.json()["output"]["text"] == counted_text(4)
    assert reassemble((await read_stream(client, plain(job_id))).events) == counted_text(4)


async def test_a_job_past_its_retention_is_gone_with_all_its_rows(
    client: httpx.AsyncClient, pool: asyncpg.Pool, settings: Settings
) -> None:
    clock = later(60)  # ahead of the jobs' creation: they are due
    quiet = settings.replace(janitor=False, compact_after_s=0, tombstone_s=600)
    body = {
        "prompt": "keep me a minute", "simulate": fast(5), "retain_s": 60,
        "webhook_url": "https://hooks.example.com/done",
    }  # fmt: skip
    kept_body = {"prompt": "keep me long", "simulate": fast(3)}
    key = {"Idempotency-Key": f"retained-{uuid.uuid4()}"}
    async with running_worker(quiet, pool=pool, clock=clock):
        job = (await client.post("/api/jobs", json=body, headers=key)).json()
        kept = (await client.post("/api/jobs", json=kept_body)).json()
        for created in (job, kept):
            await wait_for_job(
                pool, uuid.UUID(created["id"]), lambda j: j["status"] == "succeeded", what="done"
            )
    job_id = uuid.UUID(job["id"])
    written = await rows_of(pool, job_id)
    assert written == {
        **written, "jobs": 1, "job_attempts": 1, "webhook_deliveries": 1, "tenant_jobs": 1
    }  # fmt: skip
    janitor = Janitor(pool, quiet, clock=clock)
    done = await janitor.run_round()
    assert done is not None and (done.settled, done.deleted) == (2, 0)
    events = (await rows_of(pool, job_id))["job_events"]  # as compacted
    # At least the claim's row (reset, status) and the success's (its last chunk, usage, done:
    # job_events.earlier); the text appended before the success, if any, folded into one.
    assert 2 <= events <= written["job_events"]
    read = (await client.get(f"/api/jobs/{job_id}")).json()
    finished = datetime.fromisoformat(read["finished_at"])
    assert (read["retain_s"], datetime.fromisoformat(read["expires_at"])) == (
        60, finished + timedelta(seconds=60),
    )  # fmt: skip

    clock.advance(59)
    done = await janitor.run_round()
    assert done is not None and done.deleted == 0  # not yet
    clock.advance(2)
    done = await janitor.run_round()
    assert done is not None and (done.deleted, done.deleted_rows) == (1, 1 + 1 + events + 1 + 1)
    assert await rows_of(pool, job_id) == dict.fromkeys(TABLES, 0)
    # Its idempotency key is remembered with its tombstone: the same request is told the job
    # is gone, another is a conflict, and neither makes a job.
    again = await client.post("/api/jobs", json=body, headers=key)
    assert again.status_code == 410, again.text
    assert again.json()["type"] == "/problems/idempotency-key-gone"
    assert job["id"] in again.json()["detail"]
    other = await client.post("/api/jobs", json={**body, "prompt": "other"}, headers=key)
    assert other.status_code == 409 and other.json()["type"] == "/problems/idempotency-conflict"
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 1  # `kept` alone
    for response in (
        await client.get(f"/api/jobs/{job_id}"),
        await client.get(plain(job_id)),
        await client.get(plain(job_id), headers={"Accept": "text/event-stream"}),
        await client.post(f"/api/jobs/{job_id}/cancel"),
    ):
        assert response.status_code == 410, response.text
        assert response.headers["content-type"] == PROBLEM
        assert response.json()["type"] == "/problems/gone"
    # The job kept for the default retention (a week) is untouched.
    assert (await client.get(f"/api/jobs/{kept['id']}")).status_code == 200
    # Its tombstone is kept for JOBSTREAM_TOMBSTONE_S; then the id is as unknown as any other.
    clock.advance(601)
    done = await janitor.run_round()
    assert done is not None and done.tombstones_pruned == 1
    assert (await client.get(f"/api/jobs/{job_id}")).status_code == 404
    # ...and its key with it: the same key and body make a new job.
    again = await client.post("/api/jobs", json=body, headers=key)
    assert again.status_code == 202 and again.json()["id"] != job["id"], again.text


async def test_a_deleted_jobs_idempotency_key_makes_a_new_job(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    key = {"Idempotency-Key": f"deleted-{uuid.uuid4()}"}
    body = {"prompt": "delete me", "simulate": fast(1)}
    first = (await client.post("/api/jobs", json=body, headers=key)).json()
    replay = await client.post("/api/jobs", json=body, headers=key)
    assert replay.json()["id"] == first["id"]
    held = await drive.claim(pool)
    await drive.succeed(pool, held, "done")
    assert await jobs.delete_finished(pool, "default", uuid.UUID(first["id"])) is True
    assert await rows_of(pool, uuid.UUID(first["id"])) == dict.fromkeys(TABLES, 0)
    again = await client.post("/api/jobs", json=body, headers=key)
    assert again.status_code == 202 and again.json()["id"] != first["id"], again.text


async def test_a_tenants_cap_shortens_retention_and_no_tombstone_means_404(
    client: httpx.AsyncClient, pool: asyncpg.Pool, settings: Settings
) -> None:
    await pool.execute("UPDATE tenants SET max_retain_s = 30 WHERE id = 'default'")
    created = await client.post("/api/jobs", json={"prompt": "x", "retain_s": 3600})
    job_id = created.json()["id"]
    await drive.succeed(pool, await drive.claim(pool), "done")
    clock = later()
    janitor = Janitor(pool, settings.replace(compact_after_s=0, tombstone_s=0), clock=clock)
    await janitor.run_round()
    read = (await client.get(f"/api/jobs/{job_id}")).json()
    assert datetime.fromisoformat(read["expires_at"]) == datetime.fromisoformat(
        read["finished_at"]
    ) + timedelta(seconds=30)
    clock.advance(31)
    done = await janitor.run_round()
    assert done is not None and done.deleted == 1
    assert (await client.get(f"/api/jobs/{job_id}")).status_code == 404
    refused = await client.post("/api/jobs", json={"prompt": "x", "retain_s": 366 * 86_400})
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["field"] == "retain_s"


COUNTERS = (
    "jobstream_jobs_created_total",
    "jobstream_jobs_accepted_total",
    "jobstream_retries_total",
    "jobstream_events_appended_total",
    "jobstream_charged_usd_total",
    "jobstream_queue_wait_seconds_count",
    "jobstream_run_duration_seconds_count",
)


async def test_counters_keep_their_values_when_history_is_deleted(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    await retried_job(client, pool)
    for text in ("a", "b c"):
        await client.post("/api/jobs", json={"prompt": text})
        held = await drive.claim(pool)
        await drive.tokens(pool, held, [text])
        await drive.succeed(pool, held, text)
    await client.post("/api/jobs", json={"prompt": "still queued"})
    before = samples((await client.get("/metrics")).text)
    # What the tables say while they still hold everything.
    events = await pool.fetchval("SELECT sum(last_seq) FROM jobs")
    assert before[("jobstream_events_appended_total", ())] == events == 22 + 2 * 6 + 1
    assert before[("jobstream_jobs_created_total", ())] == 4
    assert before[("jobstream_jobs_accepted_total", ())] == 3
    assert before[("jobstream_retries_total", ())] == 1
    outcomes = await pool.fetch("SELECT outcome, count(*) AS n FROM job_attempts GROUP BY 1")
    for row in outcomes:
        key = ("jobstream_attempts_total", (("outcome", row["outcome"]), ("provider", "simulated")))
        assert before[key] == row["n"]
    cost = await pool.fetchval("SELECT sum(cost_usd) FROM job_attempts")
    assert before[("jobstream_provider_cost_usd_total", (("provider", "simulated"),))] == float(
        cost
    )
    assert before[("jobstream_queue_wait_seconds_count", ())] == 3
    assert before[("jobstream_run_duration_seconds_count", ())] == 4
    assert before[("jobstream_queue_depth", ())] == 1

    clock = later()
    janitor = Janitor(pool, Settings(compact_after_s=0, retention_s=1), clock=clock)
    await janitor.run_round()
    clock.advance(2)
    done = await janitor.run_round()
    assert done is not None and done.deleted == 3
    assert await pool.fetchval("SELECT count(*) FROM job_log") == 1  # the queued job's
    after = samples((await client.get("/metrics")).text)
    # Only the janitor's own figures moved, and the age of the job still queued.
    moving = ("jobstream_janitor_", "jobstream_oldest_queued_age")
    changed = {name for name, value in before.items() if after.get(name) != value}
    assert {name for name in changed if not name[0].startswith(moving)} == set()
    assert after[("jobstream_janitor_jobs_deleted_total", ())] == 3
    assert after[("jobstream_janitor_jobs_compacted_total", ())] == 3
    # Jobs, their tenant_jobs rows, attempts, and the stored events: each log less its seq 1,
    # which has no row (the job_log view), less one row for each claim, for each success and
    # for the retried job's failed attempt (each writes two events in one row:
    # job_events.earlier), and the retried job's less the 11 compaction folded away.
    assert after[("jobstream_janitor_rows_deleted_total", ())] == (
        3 + 3 + 4 + (22 - 1 - 11 - 2 - 1 - 1) + 2 * (6 - 1 - 2)
    )
    assert after[("jobstream_janitor_lag_seconds", (("stage", "delete"),))] == 0


async def test_two_janitors_never_work_at_once(
    client: httpx.AsyncClient, pool: asyncpg.Pool, settings: Settings
) -> None:
    await client.post("/api/jobs", json={"prompt": "x"})
    await drive.succeed(pool, await drive.claim(pool), "x")
    clock = later()
    quick = settings.replace(compact_after_s=0, retention_s=1)
    first, second = Janitor(pool, quick, clock=clock), Janitor(pool, quick, clock=clock)
    assert (await first.run_round()) is not None  # settles the job
    clock.advance(2)
    # Hold the first janitor inside its round: its tombstone insert waits for this lock.
    async with pool.acquire() as holder, holder.transaction():
        await holder.execute("LOCK TABLE job_tombstones IN SHARE MODE")
        working = asyncio.create_task(first.run_round())

        async def waiting() -> int:
            return int(
                await pool.fetchval(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'relation' AND NOT granted"
                    " AND relation = 'job_tombstones'::regclass"
                )
            )

        await eventually(waiting, lambda n: n == 1, what="the first janitor waits in its round")
        assert (await second.run_round()) is None  # the lock is taken: not its turn
        assert not working.done()
    done = await asyncio.wait_for(working, 10)
    assert done is not None and done.deleted == 1
    done = await second.run_round()  # its turn now, with nothing left to do
    assert done is not None and (done.settled, done.deleted) == (0, 0)


async def test_a_soak_of_jobs_that_come_and_go_keeps_the_database_bounded(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    clock = later(60)
    quick = settings.replace(janitor=False, compact_after_s=0, retention_s=1, tombstone_s=1)
    janitor = Janitor(pool, quick, clock=clock)
    sizes: list[int] = []
    async with running_worker(quick, pool=pool, clock=clock) as worker:
        for cycle in range(8):
            for i in range(25):
                await create_job(pool, prompt=f"cycle {cycle} job {i}", simulate=fast(20))
            await eventually(
                lambda: pool.fetchval("SELECT count(*) FROM jobs WHERE finished_at IS NULL"),
                lambda n: n == 0,
                what="every job of the cycle ends",
            )
            await wait_idle(worker)
            await janitor.run_round()  # settles
            clock.advance(2)
            await janitor.run_round()  # deletes
            clock.advance(2)
            await janitor.run_round()  # prunes the tombstones
            assert await pool.fetchval("SELECT count(*) FROM jobs") == 0
            # Autovacuum's part, done at once: the space of deleted rows becomes reusable.
            await pool.execute("VACUUM jobs, job_events, job_attempts, job_tombstones")
            sizes.append(
                await pool.fetchval(
                    "SELECT sum(pg_total_relation_size(t))::bigint"
                    " FROM unnest($1::regclass[]) AS t",
                    [*TABLES, "job_tombstones"],
                )
            )
    # After the first cycles have sized the tables, the rest reuse their space.
    assert max(sizes[3:]) <= sizes[2] * 1.25, sizes


async def test_the_janitors_asynchronous_commits_end_with_its_batches(
    database_url: str, settings: Settings
) -> None:
    # Regression: the janitor's session-wide `SET synchronous_commit = off` stayed on its pooled
    # connection (the pool's release keeps session state), so later token appends and successes
    # on it committed without waiting for the WAL: a PostgreSQL crash lost text followers had
    # read (the chaos test, about one run in ten).
    one = await db.create_pool(database_url, min_size=1, max_size=1)  # the product's own pool
    try:
        janitor = Janitor(one, settings.replace(compact_after_s=0), clock=later())
        await janitor.run_round()
        assert await one.fetchval("SHOW synchronous_commit") == "on"
    finally:
        await one.close()
