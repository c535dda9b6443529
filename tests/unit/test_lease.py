"""The lease renewals without a database: a pool stand-in decides how each renewal goes."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, cast

import asyncpg

from jobstream.claims import Claimed
from jobstream.jobspec import AttemptSpec
from jobstream.worker.inbox import Inbox, LeaseLost
from jobstream.worker.lease import Leases
from jobstream.workers import WorkerProcess
from tests.support.clock import ManualClock

LEASE_S = 0.3


class BlackHolePool:
    """A pool whose queries never answer: a connection whose peer vanished without a reset."""

    def __init__(self) -> None:
        self.renewals = 0

    async def fetch(self, *args: Any) -> None:
        self.renewals += 1
        await asyncio.get_running_loop().create_future()


def held() -> Claimed:
    spec = AttemptSpec.from_payload({"prompt": "hi"})
    return Claimed(uuid.uuid4(), "default", 1, uuid.uuid4(), "simulated", spec, 3, 1)


async def test_a_renewal_that_hangs_past_the_lease_ends_the_attempt() -> None:
    pool = BlackHolePool()
    inbox = Inbox()
    loop = asyncio.get_running_loop()
    worker = WorkerProcess.this_process("w", ["llm"], 8)
    leases = Leases(cast(asyncpg.Pool, pool), worker=worker, lease_s=LEASE_S, clock=ManualClock())
    lease = leases.hold(held(), inbox, claimed_at=loop.time())
    renewals = asyncio.create_task(leases.run())
    try:
        async with asyncio.timeout(5):
            (message,) = await inbox.take()
    finally:
        renewals.cancel()
    assert pool.renewals == 1
    assert isinstance(message, LeaseLost)
    assert loop.time() >= lease.deadline  # not before the lease could have run out
    assert len(leases) == 0  # a lost lease is renewed no more
