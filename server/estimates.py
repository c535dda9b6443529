"""How long a job will take: `estimated_time_sec` in a create's answer, `estimated_remaining_sec`
and `Retry-After` in a poll's (the long-running-task pattern), so a client polls when there is
something to see rather than on a fixed beat.

The figures come from what is already kept, never from the jobs' history (ESTIMATE_INPUTS):
per provider, the mean run of the attempts that ended lately (metric_totals' run_s over its
attempts of every outcome), the attempts running now and the jobs runnable now (two partial
indexes). A job still queued is done in

    wait + run = (others runnable of its provider) x mean run / max(running attempts, 1) + mean run

(plus the time until its run_at, for a delayed one): the running attempts are the slots that
drain its queue, each in a mean run. A running job is done a mean run after its attempt began,
and said to need at least MIN_REMAINING_S when it is past that. Simple and pessimistic where the
claim is kinder (a tenant's jobs take turns with other tenants', priorities jump the queue); no
estimate (null) for a provider with no ended attempt, or a job that has ended.

The create path is hot (group-committed creates, thousands a second): the inputs are read at
most once every REFRESH_S by one request while the others of that moment wait for the same
read, and a failed read leaves the last inputs (or none) in place: an estimate never fails a
request.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg
import structlog

from jobstream import db
from jobstream.clock import Clock
from jobstream.rows import AttemptRow, JobRow
from jobstream.sql import queries

log = structlog.get_logger(__name__)

REFRESH_S = 1.0  # the inputs' age at most: one read a second per server process
# The mean run is of the attempts that ended since a read at least this long ago, when any did.
RECENT_S = 300.0
READ_TIMEOUT_S = 0.5  # a read slower than this keeps the last inputs: answers do not wait on it
# Runnable jobs counted at most (ESTIMATE_INPUTS' $2): an index-only scan of jobs_runnable_idx,
# 2 ms for 10,000 entries here. Past it the wait is a floor, and already 10,000 mean runs
# over the running attempts: Retry-After is at its most long before.
COUNT_CAP = 10_000
MIN_REMAINING_S = 1.0  # what a running job past its mean run is said to need
# Retry-After: at least a second (its unit), at most this, so a long job is still looked at.
MAX_RETRY_AFTER_S = 30


@dataclass(frozen=True, slots=True)
class ProviderLoad:
    mean_run_s: float | None  # None: no attempt of this provider has ended
    running: int  # attempts under way
    queued: int  # jobs runnable now (up to COUNT_CAP in all)


@dataclass(frozen=True, slots=True)
class Inputs:
    providers: Mapping[str, ProviderLoad]

    def remaining(
        self,
        job: JobRow,
        now: datetime,
        *,
        running_since: datetime | None = None,
        besides: int = 0,
        counted: bool = True,
    ) -> float | None:
        """Seconds until `job` is done, to a tenth, or None (ended, or nothing to go on).
        `running_since`: its attempt's start (default: its first's). A queued job waits for the
        runnable jobs of its provider as last counted, but itself if `counted` (it may be among
        them; a batch's jobs, written after the read, are not), and for `besides` more (the
        batch's earlier jobs)."""
        load = self.providers.get(job.provider)
        if load is None or load.mean_run_s is None:
            return None
        run = load.mean_run_s
        if job.status == "queued":
            delay = max((job.run_after - now).total_seconds(), 0.0)
            # A job not yet due is not among the runnable counted.
            itself = 1 if counted and delay == 0 else 0
            ahead = max(load.queued - itself, 0) + besides
            # The running attempts are the slots that drain the queue, each in a mean run.
            wait = ahead * run / max(load.running, 1)
            return round(delay + wait + run, 1)
        if job.status == "running":
            started = running_since or job.started_at or now
            ran = (now - started).total_seconds()
            return round(max(run - ran, MIN_REMAINING_S), 1)
        return None  # ended, or cancelling: the worker confirms within a lease renewal


NOTHING = Inputs({})


def retry_after(remaining_s: float | None) -> dict[str, str]:
    """The Retry-After header a poll's answer carries: the estimate in whole seconds, bounded."""
    if remaining_s is None:
        return {}
    return {"Retry-After": str(min(max(math.ceil(remaining_s), 1), MAX_RETRY_AFTER_S))}


def current_attempt_start(attempts: list[AttemptRow]) -> datetime | None:
    """When the attempt under way began (None: none is)."""
    return next((a.started_at for a in reversed(attempts) if a.outcome == "running"), None)


def now_of(clock: Clock) -> datetime:
    """The time a job's timestamps are compared with: the injected clock's, else this host's.
    The database wrote them with its own clock; hosts' clocks agree to well under the second an
    estimate is given in."""
    return clock.now() or datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class _Totals:
    at: float  # monotonic seconds
    ended: dict[str, tuple[int, float]]  # provider: (attempts ended, their run seconds)


class Estimates:
    """The inputs of every estimate this process gives, read at most once every `refresh_s`."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        clock: Clock,
        *,
        refresh_s: float = REFRESH_S,
        recent_s: float = RECENT_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._refresh_s = refresh_s
        self._recent_s = recent_s
        self._monotonic = monotonic
        self._lock = asyncio.Lock()
        self._inputs = NOTHING
        self._read_at = -math.inf
        # The counters as read over the last recent_s: the mean run is their difference's.
        self._history: deque[_Totals] = deque()

    async def inputs(self) -> Inputs:
        if self._fresh():
            return self._inputs
        async with self._lock:  # one read; the requests of this moment wait for it
            if not self._fresh():
                await self._read()
        return self._inputs

    def _fresh(self) -> bool:
        return self._monotonic() - self._read_at < self._refresh_s

    async def _read(self) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                rows = await self._pool.fetch(queries.ESTIMATE_INPUTS, self._clock.now(), COUNT_CAP)
        except (*db.DISCONNECTS, asyncpg.PostgresError) as exc:
            log.warning("estimate_inputs_unread", error=str(exc) or type(exc).__name__)
        else:
            self._inputs = self._update(rows)
        # A failure too: the next try is a refresh away, not at the next request.
        self._read_at = self._monotonic()

    def _update(self, rows: list[asyncpg.Record]) -> Inputs:
        now = self._monotonic()
        totals = _Totals(now, {r["provider"]: (r["runs"], r["run_s"]) for r in rows})
        history = self._history
        history.append(totals)
        # The base: the newest read at least recent_s ago (else the oldest), so that the mean
        # is of at least recent_s of ended attempts.
        while len(history) > 1 and history[1].at <= now - self._recent_s:
            history.popleft()
        base = history[0]
        return Inputs(
            {
                r["provider"]: ProviderLoad(
                    _mean_run(totals.ended[r["provider"]], base.ended.get(r["provider"], (0, 0))),
                    r["running"],
                    r["queued"],
                )
                for r in rows
            }
        )


def _mean_run(now: tuple[int, float], then: tuple[int, float]) -> float | None:
    """The mean run of the attempts that ended since `then`, or of all if none did (or the
    counters went back: a restored database)."""
    runs, run_s = now
    recent_runs, recent_s = runs - then[0], run_s - then[1]
    if recent_runs > 0 and recent_s >= 0:
        return recent_s / recent_runs
    return run_s / runs if runs > 0 else None
