"""bench.queue_wal's meter: its two accounts of a batch's WAL agree, and the rows it reports are
the ones a job's life is known to write."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from bench import queue_wal
from bench.wal_meter import Meter, Rows, Sample
from jobstream import db

JOBS = 8
BATCH = 4


@pytest.fixture
async def one_connection(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await db.create_pool(database_url, min_size=1, max_size=1)
    yield pool
    await pool.close()


async def test_a_life_measured_stage_by_stage(
    database_url: str, one_connection: asyncpg.Pool
) -> None:
    pool = one_connection
    if await pool.fetchval("SELECT current_setting('server_version_num')::int") < 180000:
        # The backend's own WAL counters (pg_stat_get_backend_wal) are PostgreSQL 18's: the
        # meter cannot run on make test-pg15's server.
        pytest.skip("bench.queue_wal's meter needs PostgreSQL 18")
    meter = await Meter.open(database_url, pool)
    samples: dict[str, list[Sample]] = {stage: [] for stage in queue_wal.STAGES}

    async def measured(stage: str, jobs: int, work: queue_wal.Work) -> None:
        samples[stage].append(await meter.measure(jobs, work))

    try:
        await queue_wal.life(pool, measured, jobs=JOBS, batch=BATCH, create_batch=JOBS)
    finally:
        await meter.close()

    # Every batch: the records found, put to their relations, add up to what the backend
    # counted itself, record for record and byte for byte.
    for stage, got in samples.items():
        for sample in got:
            assert sample.agrees, (stage, sample.backend, sample.records, sample.bytes)
            assert sample.records > 0
    stages = {stage: Sample.total(got) for stage, got in samples.items() if got}
    assert [s.jobs for s in stages.values()] == [JOBS] * 5
    assert [len(samples[s]) for s in ("create", "claim", "success")] == [1, 2, 2]
    # The rows each stage is known to write, a job: a create inserts the job and its entry in
    # the tenant's list; a claim rewrites the job, opens an attempt and two events; a success
    # rewrites both again and appends three events (the last chunk, usage, done).
    jobs = {stage: s.tables["jobs"] for stage, s in stages.items()}
    assert jobs["create"] == Rows(ins=JOBS)
    assert (jobs["claim"].upd, jobs["success"].upd, jobs["settle"].upd) == (JOBS, JOBS, JOBS)
    assert jobs["delete"].dele == JOBS
    assert stages["create"].tables["tenant_jobs"].ins == JOBS
    assert stages["claim"].tables["job_attempts"].ins == JOBS
    assert stages["claim"].tables["job_events"].ins == 2 * JOBS
    assert stages["success"].tables["job_events"].ins == 3 * JOBS
    assert stages["delete"].tables["job_events"].dele == 5 * JOBS
    # Each new event's key lands in job_events_pkey: at least as many index entries.
    assert stages["claim"].places["job_events_pkey"].index_entries >= 2 * JOBS
    assert stages["success"].places["job_events_pkey"].index_entries >= 3 * JOBS
