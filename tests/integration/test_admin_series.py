"""The janitor's per-minute series (jobstream/series.py): folded once a minute, the minute
before folded again, and pruned after JOBSTREAM_ADMIN_SERIES_KEEP_S."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg

from jobstream.settings import Settings
from jobstream.worker.janitor import Janitor
from tests.support.clock import ManualClock


async def test_rows_past_the_keep_window_are_pruned_and_the_rest_stay(
    settings: Settings, pool: asyncpg.Pool
) -> None:
    clock = ManualClock(datetime.now(UTC).replace(second=30, microsecond=0))
    minute = clock.now().replace(second=0)
    old, kept = minute - timedelta(days=2), minute - timedelta(hours=23)
    for when in (old, kept):
        await pool.execute(
            "INSERT INTO metric_minutes VALUES ($1, 0, 0, 0, NULL, 0, NULL)", when
        )  # fmt: skip
        await pool.execute(
            "INSERT INTO attempt_minutes VALUES ($1, 'default', 'llm', 'm', 1, 0)", when
        )  # fmt: skip
    janitor = Janitor(pool, settings.replace(admin_series_keep_s=86_400), clock=clock)
    await janitor.run_round()
    metric = {r[0] for r in await pool.fetch("SELECT minute FROM metric_minutes")}
    assert old not in metric and kept in metric and minute in metric
    spend = {r[0] for r in await pool.fetch("SELECT minute FROM attempt_minutes")}
    assert spend == {kept}


async def _failed_attempt(pool: asyncpg.Pool, job: str, ended: datetime) -> None:
    """A job that failed in its one attempt, which ended at `ended` and cost 0.25."""
    await pool.execute(
        "INSERT INTO jobs (id, tenant_id, request_hash, status, provider, payload, max_attempts,"
        " attempts, finished_at, job_name) VALUES ($1, 'default', '', 'failed', 'simulated',"
        " '{}', 1, 1, $2, 'llm')",
        job, ended,
    )  # fmt: skip
    await pool.execute(
        "INSERT INTO job_attempts (job_id, attempt, run_token, worker_id, started_at,"
        " finished_at, outcome, provider, model, cost_usd) VALUES ($1, 1, gen_random_uuid(),"
        " 'w', $2, $2, 'failed', 'simulated', 'm', 0.25)",
        job, ended,
    )  # fmt: skip


async def test_an_attempt_that_commits_late_is_folded_with_the_minute_before(
    settings: Settings, pool: asyncpg.Pool
) -> None:
    """The fold covers the minute before its last one again: an attempt whose end's time is in
    a minute already folded, committed after that fold, is counted at the next."""
    clock = ManualClock(datetime.now(UTC).replace(second=30, microsecond=0) + timedelta(hours=1))
    janitor = Janitor(pool, settings, clock=clock)
    ended = clock.now() - timedelta(minutes=1)  # in the minute before this one
    await _failed_attempt(pool, "0193a000-0000-7000-8000-00000000aaaa", ended)
    await janitor.run_round()  # folds the hour up to this minute: the first job
    await _failed_attempt(pool, "0193a000-0000-7000-8000-00000000bbbb", ended)  # late
    await janitor.run_round()  # the same minute: no fold of attempts
    clock.advance(60)
    await janitor.run_round()  # the next: the last folded minute again, with the late one
    rows = await pool.fetch("SELECT minute, cost_usd, jobs_failed FROM attempt_minutes")
    assert [(r["minute"], float(r["cost_usd"]), r["jobs_failed"]) for r in rows] == [
        (ended.replace(second=0), 0.5, 2)
    ]
