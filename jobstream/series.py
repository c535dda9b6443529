"""The dashboard's per-minute series: what the janitor folds, and the overview's hour of it.

Two tables, both keyed by their minute (schema.sql):
- metric_minutes: metric_totals' counters as they stood at the end of each minute, rewritten by
  every janitor round while the minute lasts. A minute's throughput is the difference of two
  rows, and its queue-wait and run-time percentiles are read from the difference of two
  histograms, as Prometheus's histogram_quantile reads them. The counters are the writers'
  (metric_totals), so this costs the hot path nothing.
- attempt_minutes: what the attempts that ended in a minute cost, by tenant, job name and
  model, and the jobs they ended failed or dead, folded once a minute from the attempts that
  ended (job_attempts_finished_idx), the minute before folded again (a late commit).
Both are pruned after JOBSTREAM_ADMIN_SERIES_KEEP_S. The overview reads 61 rows of the first and
at most a day of the second, never history.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

import asyncpg

from jobstream.clock import Clock
from jobstream.db import Queryable
from jobstream.sql import queries
from jobstream.types import DURATION_BUCKETS

MINUTE = timedelta(minutes=1)
# How far back the first fold of attempt_minutes reaches (a janitor that was away longer leaves
# the minutes before it empty: the hour the overview shows, no more).
FIRST_FOLD = timedelta(hours=1)


@dataclass
class Folded:
    """What one fold did: the minute it is, and whether attempt_minutes was folded up to it."""

    minute: datetime
    attempt_minutes: bool


async def fold(
    conn: Queryable, clock: Clock, *, keep_s: int, last_minute: datetime | None
) -> Folded:
    """One janitor round's fold: the counters into the current minute's row, always (a read of
    metric_totals' few rows); the attempts of the minutes that ended since `last_minute` (the
    minute of this janitor's last fold), once a minute; and the rows past `keep_s`."""
    now = clock.now()
    await conn.execute(queries.FOLD_METRIC_MINUTE, now)
    minute: datetime = await conn.fetchval(queries.CURRENT_MINUTE, now)
    if minute == last_minute:
        return Folded(minute, False)
    newest: datetime | None = await conn.fetchval(queries.LAST_ATTEMPT_MINUTE)
    start = minute - FIRST_FOLD if newest is None else max(newest - MINUTE, minute - FIRST_FOLD)
    await conn.execute(queries.FOLD_ATTEMPT_MINUTES, start, minute)
    await conn.execute(queries.PRUNE_METRIC_MINUTES, now, keep_s)
    await conn.execute(queries.PRUNE_ATTEMPT_MINUTES, now, keep_s)
    return Folded(minute, True)


@dataclass(frozen=True)
class Series:
    """One entry a minute, oldest first: the overview's charts."""

    minutes: list[datetime]
    created: list[int]
    succeeded: list[int]
    failed: list[int]
    queue_wait_p50_s: list[float | None]
    queue_wait_p95_s: list[float | None]
    run_p50_s: list[float | None]
    run_p95_s: list[float | None]


@dataclass(frozen=True)
class Spend:
    tenant: str
    job_name: str
    model: str
    usd: Decimal


async def last_hour(conn: Queryable, clock: Clock) -> Series:
    """The last 60 minutes, the current one last (still filling)."""
    minute: datetime = await conn.fetchval(queries.CURRENT_MINUTE, clock.now())
    first = minute - 59 * MINUTE
    # One row more, before the first: the counters its difference starts from.
    rows = await conn.fetch(queries.SERIES_MINUTES, first - MINUTE, minute)
    failed = {r["minute"]: int(r["n"]) for r in await conn.fetch(queries.SERIES_FAILED, first)}
    series = Series([], [], [], [], [], [], [], [])
    for before, row in itertools.pairwise(rows):
        series.minutes.append(row["minute"])
        series.created.append(_delta(row, before, "jobs_created"))
        series.succeeded.append(_delta(row, before, "jobs_accepted"))
        series.failed.append(failed.get(row["minute"], 0))
        waits = _histogram_delta(row["queue_wait_counts"], before["queue_wait_counts"])
        first_attempts = _delta(row, before, "first_attempts")
        series.queue_wait_p50_s.append(quantile(0.5, waits, first_attempts))
        series.queue_wait_p95_s.append(quantile(0.95, waits, first_attempts))
        runs = _histogram_delta(row["run_counts"], before["run_counts"])
        ended = _delta(row, before, "attempts_ended")
        series.run_p50_s.append(quantile(0.5, runs, ended))
        series.run_p95_s.append(quantile(0.95, runs, ended))
    return series


async def spend(conn: Queryable, clock: Clock) -> tuple[list[Spend], list[Spend]]:
    """What attempts cost in the last hour and the last day, by tenant, job name and model
    (whole minutes folded so far: the current minute joins at its end)."""
    minute: datetime = await conn.fetchval(queries.CURRENT_MINUTE, clock.now())
    rows = await conn.fetch(queries.SERIES_SPEND, minute - timedelta(days=1), minute - 60 * MINUTE)
    day = [Spend(r["tenant_id"], r["job_name"], r["model"], r["day"]) for r in rows]
    hour = [
        Spend(r["tenant_id"], r["job_name"], r["model"], r["hour"]) for r in rows if r["hour"] > 0
    ]
    hour.sort(key=lambda s: s.usd, reverse=True)
    return hour, day


def _delta(row: asyncpg.Record, before: asyncpg.Record, column: str) -> int:
    """How much a counter moved in a minute; 0 where either end is unknown (no fold yet)."""
    now, then = row[column], before[column]
    if now is None or then is None:
        return 0
    return max(0, int(now) - int(then))


def _histogram_delta(now: Sequence[int] | None, then: Sequence[int] | None) -> list[int]:
    if now is None:
        return [0] * len(DURATION_BUCKETS)
    if then is None:
        then = [0] * len(now)
    return [max(0, a - b) for a, b in zip(now, then, strict=True)]


def quantile(q: float, counts: Sequence[int], total: int) -> float | None:
    """The q-quantile of durations counted cumulatively per bound of DURATION_BUCKETS, `total`
    being the +Inf count: linear within the bucket it falls in, as Prometheus's
    histogram_quantile; the last bound when it falls past it; None for no observation."""
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0
    for bound, count in zip(DURATION_BUCKETS, counts, strict=True):
        if count >= rank:
            if count == lower_count:
                return float(bound)
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (
                count - lower_count
            )
        lower_bound, lower_count = float(bound), count
    return float(DURATION_BUCKETS[-1])
