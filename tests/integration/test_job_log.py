"""A job's log opens with its `queued` event at seq 1, which INSERT_JOBS does not store: the
job_log view gives it from the job, once, beside whatever the log does store."""

from __future__ import annotations

import asyncpg

from jobstream import claims, events
from jobstream.clock import DatabaseClock
from tests.support.workers import create_job


async def _stored(pool: asyncpg.Pool, job_id: object) -> list[int]:
    rows = await pool.fetch("SELECT seq FROM job_events WHERE job_id = $1 ORDER BY seq", job_id)
    return [r["seq"] for r in rows]


async def test_a_new_jobs_log_reads_its_queued_event_from_the_job(pool: asyncpg.Pool) -> None:
    job_id = await create_job(pool)
    created_at = await pool.fetchval("SELECT created_at FROM jobs WHERE id = $1", job_id)
    assert await _stored(pool, job_id) == []
    [queued] = await events.read_after(pool, job_id, 0)
    assert (queued.seq, queued.type, queued.attempt) == (1, "status", 0)
    assert queued.data == {"status": "queued"} and queued.at == created_at
    assert await events.read_after(pool, job_id, 1) == []

    claimed = await claims.claim(
        pool, providers=["simulated"], worker_id="w", lease_s=60, clock=DatabaseClock()
    )
    assert claimed is not None and claimed.job_id == job_id
    stored = await _stored(pool, job_id)
    assert stored[0] == 2  # the claim's events; seq 1 still has no row
    log = await events.read_after(pool, job_id, 0)
    assert [e.seq for e in log] == [1, *stored]
    assert log[0].data == {"status": "queued"} and log[-1].data == {"status": "running"}
    many = await events.read_after_many(pool, {job_id: 0})
    assert [e.seq for e in many[job_id]] == [1, *stored]


async def test_a_stored_seq_1_is_read_as_stored_and_once(pool: asyncpg.Pool) -> None:
    # A log written before schema version 7 stores its seq 1 (an operator's retry does too).
    job_id = await create_job(pool)
    await pool.execute(
        "INSERT INTO job_events (job_id, seq, attempt, type, data)"
        ' VALUES ($1, 1, 0, \'status\', \'{"status": "queued", "stored": true}\')',
        job_id,
    )
    [queued] = await events.read_after(pool, job_id, 0)
    assert queued.data == {"status": "queued", "stored": True}
    many = await events.read_after_many(pool, {job_id: 0})
    assert [e.data for e in many[job_id]] == [{"status": "queued", "stored": True}]


async def test_a_log_whose_head_was_deleted_starts_past_the_gap(pool: asyncpg.Pool) -> None:
    job_id = await create_job(pool)
    await pool.execute(
        "INSERT INTO job_events (job_id, seq, attempt, type, data)"
        " SELECT $1, s, 1, 'token', jsonb_build_object('text', s::text)"
        "   FROM generate_series(2, 6) AS s",
        job_id,
    )
    await pool.execute("DELETE FROM job_events WHERE job_id = $1 AND seq <= 3", job_id)
    # Not seq 1 again: the reader sees the gap and tells its client to resync.
    assert [e.seq for e in await events.read_after(pool, job_id, 0)] == [4, 5, 6]
