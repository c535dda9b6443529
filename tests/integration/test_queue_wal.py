"""bench.queue_wal's meter: its two accounts of a batch's WAL agree, and the rows it reports are
the ones a job's life is known to write."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import queue_wal
from bench.wal_meter import Meter, Rows, Sample
from jobstream import db
from jobstream.embedded_pg import EmbeddedPostgres

JOBS = 8
BATCH = 4


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[str]:
    """A PostgreSQL of the test's own, as the bench has: the records the meter reads are the
    whole cluster's, and the suite's other tests, writing beside it on the shared one, put
    records in its range that its backend did not write (seen: 82 found against 78)."""
    server = EmbeddedPostgres(tmp_path / "pg")  # the wheel's PostgreSQL 18: its counters
    server.start()
    try:
        yield server.url
    finally:
        server.destroy()


async def test_a_life_measured_stage_by_stage(own_cluster: str) -> None:
    url = await queue_wal.prepare(own_cluster)
    pool = await db.create_pool(url, min_size=1, max_size=1)
    meter = await Meter.open(url, pool)
    samples: dict[str, list[Sample]] = {stage: [] for stage in queue_wal.STAGES}

    async def measured(stage: str, jobs: int, work: queue_wal.Work) -> None:
        samples[stage].append(await meter.measure(jobs, work))

    try:
        await queue_wal.life(pool, measured, jobs=JOBS, batch=BATCH, create_batch=JOBS)
    finally:
        await meter.close()
        await pool.close()

    # Every batch: the records found, put to their relations, add up to what the backend
    # counted itself, record for record and byte for byte.
    for stage, got in samples.items():
        for sample in got:
            assert sample.agrees, (stage, sample.backend, sample.records, sample.bytes)
            assert sample.records > 0
            # The backend runs on this machine: its CPU is read, and a batch's statements took
            # some (a statement is tens of microseconds at least; the figure is nanoseconds).
            assert sample.cpu_s is not None and sample.cpu_s > 0, (stage, sample.cpu_s)
    stages = {stage: Sample.total(got) for stage, got in samples.items() if got}
    assert [s.jobs for s in stages.values()] == [JOBS] * 5
    assert [len(samples[s]) for s in ("create", "claim", "success")] == [1, 2, 2]
    # The rows each stage is known to write, a job: a create inserts the job and its entry in
    # the tenant's list; a claim rewrites the job and opens its log's row of two events (reset,
    # status); a success rewrites the job again, writes its attempt's one row and appends one
    # row of three events (the last chunk, usage, done).
    jobs = {stage: s.tables["jobs"] for stage, s in stages.items()}
    assert jobs["create"] == Rows(ins=JOBS)
    assert (jobs["claim"].upd, jobs["success"].upd, jobs["settle"].upd) == (JOBS, JOBS, JOBS)
    assert jobs["delete"].dele == JOBS
    assert stages["create"].tables["tenant_jobs"].ins == JOBS
    assert "job_attempts" not in stages["claim"].tables
    assert stages["success"].tables["job_attempts"] == Rows(ins=JOBS)
    assert stages["claim"].tables["job_events"].ins == JOBS
    assert stages["success"].tables["job_events"].ins == JOBS
    assert stages["delete"].tables["job_events"].dele == 2 * JOBS
    # Each new row's key lands in job_events_pkey: at least as many index entries.
    assert stages["claim"].places["job_events_pkey"].index_entries >= JOBS
    assert stages["success"].places["job_events_pkey"].index_entries >= JOBS
