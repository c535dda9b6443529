"""Keeping an attempt's lease: a fenced renewal every third of its length.

A renewal is also how the attempt learns that its job was asked to cancel when the NOTIFY was
missed: RENEW_LEASE returns the job's status. A refused renewal means the attempt no longer
holds the job; it must stop at once (DESIGN.md §4.2).
"""

from __future__ import annotations

import asyncio

import asyncpg
import structlog

from jobstream import attempts, db
from jobstream.attempts import Claimed
from jobstream.clock import Clock
from jobstream.errors import Fenced
from worker.inbox import CancelRequested, Inbox, LeaseLost

log = structlog.get_logger(__name__)

# After a renewal failed on a lost connection, try again this soon (or sooner, per the lease).
RETRY_S = 0.5


class LeaseKeeper:
    def __init__(
        self,
        pool: asyncpg.Pool,
        held: Claimed,
        inbox: Inbox,
        *,
        lease_s: float,
        clock: Clock,
        claimed_at: float,
    ) -> None:
        self._pool = pool
        self._held = held
        self._inbox = inbox
        self._lease_s = lease_s
        self._clock = clock
        self._check_now = asyncio.Event()
        # Loop time by which the lease has surely run out, as far as this process knows: measured
        # from *before* the last successful renewal was sent, so it never overestimates.
        self.deadline = claimed_at + lease_s

    def check_now(self) -> None:
        """Renew at once: a NOTIFY says the job row may have changed (a cancel)."""
        self._check_now.set()

    async def run(self) -> None:
        """Renew until the lease is lost or a cancel is seen; then tell the runner and return."""
        loop = asyncio.get_running_loop()
        interval = self._lease_s / 3
        wait_s = interval
        while True:
            try:
                async with asyncio.timeout(wait_s):
                    await self._check_now.wait()
            except TimeoutError:
                pass
            self._check_now.clear()
            sent_at = loop.time()
            try:
                # A renewal still unanswered when the lease has surely run out (a black-holed
                # connection) cannot save it: give up then, rather than keep streaming (and
                # paying the provider) for a job that another worker may hold by now.
                async with asyncio.timeout_at(self.deadline):
                    state = await attempts.renew(self._pool, self._held, self._lease_s, self._clock)
            except Fenced:
                self._inbox.put_nowait(LeaseLost("lease renewal refused: the job moved on"))
                return
            except Exception as exc:
                # A lost connection, or a server refusing work for now: the lease may still be
                # ours, so retry until it surely is not.
                if loop.time() >= self.deadline:
                    self._inbox.put_nowait(LeaseLost("could not renew before the lease ran out"))
                    return
                wait_s = min(RETRY_S, interval)
                error = str(exc) or type(exc).__name__
                if isinstance(exc, db.DISCONNECTS):
                    log.warning("lease_renewal_failed", error=error)
                else:
                    log.exception("lease_renewal_failed", error=error)
                continue
            self.deadline = sent_at + self._lease_s
            wait_s = interval
            if state.status == "cancelling":
                self._inbox.put_nowait(CancelRequested())
                return
