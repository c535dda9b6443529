"""A job's log opens with its `queued` event at seq 1, which INSERT_JOBS does not store: the
job_log view gives it from the job, once, beside whatever the log does store."""

from __future__ import annotations

import asyncpg

from jobstream import claims, events
from jobstream.clock import DatabaseClock
from jobstream.sql import queries
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
    # The claim's `reset` (seq 2) and `status` (seq 3) are one row; seq 1 still has no row.
    assert await _stored(pool, job_id) == [3]
    log = await events.read_after(pool, job_id, 0)
    assert [(e.seq, e.type) for e in log] == [(1, "status"), (2, "reset"), (3, "status")]
    assert log[0].data == {"status": "queued"} and log[-1].data == {"status": "running"}
    assert log[1].data == {"attempt": 1, "reason": "first attempt"} and log[1].attempt == 1
    many = await events.read_after_many(pool, {job_id: 0})
    assert many[job_id] == log
    in_sql = await pool.fetch(
        "SELECT seq, type FROM job_log WHERE job_id = $1 ORDER BY seq", job_id
    )
    assert [(r["seq"], r["type"]) for r in in_sql] == [(e.seq, e.type) for e in log]


async def test_a_row_of_several_events_reads_as_its_events_from_any_cursor(
    pool: asyncpg.Pool,
) -> None:
    job_id = await create_job(pool)
    # seq 2 a token; seqs 3-5 one row (`earlier` holds 3 and 4); seq 6 a token.
    await pool.execute(
        "INSERT INTO job_events (job_id, seq, attempt, type, data, earlier) VALUES"
        " ($1, 2, 1, 'token', '{\"text\": \"a\"}', NULL),"
        ' ($1, 5, 1, \'status\', \'{"n": 5}\', \'[["reset", {"n": 3}], ["usage", {"n": 4}]]\'),'
        " ($1, 6, 1, 'token', '{\"text\": \"b\"}', NULL)",
        job_id,
    )
    every = [(1, "status"), (2, "token"), (3, "reset"), (4, "usage"), (5, "status"), (6, "token")]
    for after in range(7):
        log = await events.read_after(pool, job_id, after)
        assert [(e.seq, e.type) for e in log] == every[after:]
        assert await events.read_after_many(pool, {job_id: after}) == ({job_id: log} if log else {})
    assert [e.data for e in await events.read_after(pool, job_id, 2)][:2] == [{"n": 3}, {"n": 4}]
    # Pages of two events: a full page means "read on", also when it ends inside a row.
    cursor, pages = 0, []
    while page := await events.read_after(pool, job_id, cursor, limit=2):
        pages.append([e.seq for e in page])
        cursor = page[-1].seq
    assert pages == [[1, 2], [3, 4], [5, 6]]


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


async def test_an_append_of_several_events_is_one_row_unless_one_is_read_by_type(
    pool: asyncpg.Pool,
) -> None:
    job_id = await create_job(pool)
    failure = [
        events.NewEvent("usage", {"input_tokens": 1}),
        events.NewEvent("attempt_error", {"class": "transient"}),
        events.NewEvent("status", {"status": "queued"}),
    ]
    async with pool.acquire() as conn:
        assert await events.append(conn, job_id, 1, failure, run_token=None) == 4
        assert await _stored(pool, job_id) == [4]
        # A progress is read by its row's type (LAST_PROGRESS): never folded into another row.
        mixed = [events.NewEvent("status", {"status": "x"}), events.NewEvent("progress", {"n": 1})]
        assert await events.append(conn, job_id, 1, mixed, run_token=None) == 6
    assert await _stored(pool, job_id) == [4, 5, 6]
    log = await events.read_after(pool, job_id, 0)
    assert [(e.seq, e.type) for e in log] == [
        (1, "status"), (2, "usage"), (3, "attempt_error"), (4, "status"), (5, "status"),
        (6, "progress"),
    ]  # fmt: skip
    assert [e.data for e in log[1:4]] == [e.data for e in failure]
    assert await pool.fetchval(queries.LAST_PROGRESS, job_id, 1) == {"n": 1}
