"""Keeping the leases of a worker's attempts: one fenced renewal statement a tick for all of them.

Every lease is renewed every third of its length. A renewal is also how an attempt learns that
its job was asked to cancel when the NOTIFY was missed: the statement returns each job's status.
An attempt that the statement no longer finds under its run token has lost its job and must stop
at once (docs/design.md, "Leases, renewals and the reaper"). One statement for every attempt
keeps renewals at one a tick per worker process, however many attempts it runs (a task and a
statement per attempt cost a busy worker a tenth of its time, and PostgreSQL a commit per
attempt per tick).
"""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import structlog

from jobstream import db, renewals, workers
from jobstream.claims import Claimed
from jobstream.clock import Clock
from jobstream.worker.inbox import CancelRequested, Inbox, LeaseLost
from jobstream.workers import WorkerProcess

log = structlog.get_logger(__name__)

# After a renewal failed (a lost connection) or found a row busy, try again this soon (or
# sooner, per the lease).
RETRY_S = 0.5


class Lease:
    """One attempt's lease, as far as this process knows."""

    def __init__(self, leases: Leases, held: Claimed, inbox: Inbox, deadline: float) -> None:
        self.held = held
        self.inbox = inbox
        # Loop time by which the lease has surely run out: measured from *before* the last
        # successful renewal was sent, so it never overestimates.
        self.deadline = deadline
        self._leases = leases

    def check_now(self) -> None:
        """Renew at once: a NOTIFY says the job row may have changed (a cancel)."""
        self._leases.check_now()

    def release(self) -> None:
        """The attempt stopped: renew it no more."""
        self._leases.release(self)


class Leases:
    def __init__(
        self, pool: asyncpg.Pool, *, worker: WorkerProcess, lease_s: float, clock: Clock
    ) -> None:
        self._pool = pool
        self._worker = worker
        self._lease_s = lease_s
        self._clock = clock
        self._held: dict[uuid.UUID, Lease] = {}  # by run token: one per attempt
        self._check_now = asyncio.Event()

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, held: Claimed, inbox: Inbox, *, claimed_at: float) -> Lease:
        """Keep this attempt's lease from now on; its end or cancel is posted to `inbox`.
        `claimed_at` is the loop time from before the claim was sent."""
        lease = Lease(self, held, inbox, claimed_at + self._lease_s)
        self._held[held.run_token] = lease
        return lease

    def release(self, lease: Lease) -> None:
        if self._held.get(lease.held.run_token) is lease:
            del self._held[lease.held.run_token]

    def check_now(self) -> None:
        self._check_now.set()

    async def run(self) -> None:
        """Renew until cancelled; tell each attempt that loses its lease or is asked to cancel.

        The same tick keeps the worker's own row alive (jobstream/workers.py): a renewal carries
        its heartbeat, and a worker that holds no lease sends one small heartbeat instead.
        """
        interval = self._lease_s / 3
        wait_s = interval
        while True:
            try:
                async with asyncio.timeout(wait_s):
                    await self._check_now.wait()
            except TimeoutError:
                pass
            self._check_now.clear()
            held = list(self._held.values())
            wait_s = await self._renew(held) if held else await self._beat()

    async def _beat(self) -> float:
        """The idle worker's heartbeat; returns how long to wait before the next tick."""
        interval = self._lease_s / 3
        try:
            # Bounded by the tick: an attempt claimed meanwhile must not wait behind a heartbeat
            # on a black-holed connection for its first renewal.
            async with asyncio.timeout(interval):
                await workers.heartbeat(self._pool, self._worker, self._clock)
        except Exception as exc:
            # One missed heartbeat costs nothing yet: the row counts as live for a whole lease.
            error = str(exc) or type(exc).__name__
            if isinstance(exc, db.DISCONNECTS):  # a timeout too
                log.warning("worker_heartbeat_failed", error=error)
            else:
                log.exception("worker_heartbeat_failed", error=error)
        return interval

    async def _renew(self, leases: list[Lease]) -> float:
        """One renewal of `leases`; returns how long to wait before the next."""
        loop = asyncio.get_running_loop()
        interval = self._lease_s / 3
        sent_at = loop.time()
        try:
            # A renewal still unanswered when a lease has surely run out (a black-holed
            # connection) cannot save it: give up on that one then, rather than keep streaming
            # (and paying the provider) for a job that another worker may hold by now.
            async with asyncio.timeout_at(min(lease.deadline for lease in leases)):
                renewal = await renewals.renew_many(
                    self._pool,
                    [lease.held for lease in leases],
                    self._lease_s,
                    self._clock,
                    worker_id=self._worker.id,
                )
        except Exception as exc:
            # A lost connection, or a server refusing work for now: the leases may still be
            # ours, so retry until each surely is not.
            error = str(exc) or type(exc).__name__
            if isinstance(exc, db.DISCONNECTS):  # a timeout too
                log.warning("lease_renewal_failed", error=error, attempts=len(leases))
            else:
                log.exception("lease_renewal_failed", error=error, attempts=len(leases))
            now = loop.time()
            for lease in leases:
                if now >= lease.deadline:
                    self._end(lease, LeaseLost("could not renew before the lease ran out"))
            return min(RETRY_S, interval)
        wait_s = interval
        for lease in leases:
            token = lease.held.run_token
            if self._held.get(token) is not lease:
                continue  # the attempt ended while the renewal was under way
            state = renewal.renewed.get(token)
            if state is not None:
                lease.deadline = sent_at + self._lease_s
                if state.status == "cancelling":
                    self._end(lease, CancelRequested())
            elif token in renewal.busy:
                wait_s = min(RETRY_S, interval)
            else:
                self._end(lease, LeaseLost("lease renewal refused: the job moved on"))
        return wait_s

    def _end(self, lease: Lease, message: CancelRequested | LeaseLost) -> None:
        self.release(lease)
        lease.inbox.put_nowait(message)
