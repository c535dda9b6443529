"""The lease keeper without a database: a pool stand-in decides how each renewal goes."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, cast

import asyncpg

from jobstream.attempts import Claimed
from jobstream.clock import ManualClock
from jobstream.jobspec import AttemptSpec
from worker.inbox import Inbox, LeaseLost
from worker.lease import LeaseKeeper

LEASE_S = 0.3


class BlackHolePool:
    """A pool whose queries never answer: a connection whose peer vanished without a reset."""

    def __init__(self) -> None:
        self.renewals = 0

    async def fetchrow(self, *args: Any) -> None:
        self.renewals += 1
        await asyncio.get_running_loop().create_future()


def held() -> Claimed:
    spec = AttemptSpec.from_payload({"prompt": "hi"})
    return Claimed(uuid.uuid4(), "default", 1, uuid.uuid4(), "simulated", spec, 3, 1)


async def test_a_renewal_that_hangs_past_the_lease_ends_the_attempt() -> None:
    pool = BlackHolePool()
    inbox: Inbox = asyncio.Queue()
    loop = asyncio.get_running_loop()
    keeper = LeaseKeeper(
        cast(asyncpg.Pool, pool),
        held(),
        inbox,
        lease_s=LEASE_S,
        clock=ManualClock(),
        claimed_at=loop.time(),
    )
    async with asyncio.timeout(5):
        await keeper.run()
    assert pool.renewals == 1
    message = inbox.get_nowait()
    assert isinstance(message, LeaseLost)
    assert loop.time() >= keeper.deadline  # not before the lease could have run out
