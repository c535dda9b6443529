"""What the job's code writes during an attempt: text into the coalescer, progress events into
the log, each after the text before it and fenced by the run token.

The runner (worker/attempt.py) owns it; the handler's context and its `ctx.llm` calls write
through it. It refers to none of them, so an attempt leaves no reference cycle behind
(tests/integration/test_worker_garbage.py: the worker defers young collections on that).
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import asyncpg

from jobstream import db, events
from jobstream.claims import Claimed
from jobstream.errors import Fenced
from jobstream.events import NewEvent
from jobstream.sql import queries
from jobstream.worker.coalescer import Coalescer
from jobstream.worker.inbox import Inbox, LeaseLost
from jobstream.worker.outcome import OutcomeRecorder
from jobstream.worker.step_runs import Running
from jobstream.worker.token_log import TokenLog
from jobstream.worker.token_pull import TokenPull


class JobWrites:
    def __init__(
        self,
        pool: asyncpg.Pool,
        held: Claimed,
        *,
        coalescer: Coalescer,
        tokens: TokenLog,
        pull: TokenPull,
        inbox: Inbox,
        outcome: OutcomeRecorder,
        running: Running,
    ) -> None:
        self._pool = pool
        self._held = held
        self._coalescer = coalescer
        self._tokens = tokens
        self._pull = pull
        self._inbox = inbox
        self._outcome = outcome
        self._running = running  # the steps running, whose text takes their route
        # The runner's own writes (a log in doubt, a progress event) take turns, and while one
        # is under way the worker's writer takes none of this attempt's text.
        self.alone = asyncio.Lock()
        self._ended = False

    def end(self) -> None:
        """The attempt is over: every later write raises Fenced (a handler still running in a
        thread learns so at its next call)."""
        self._ended = True

    def check_open(self) -> None:
        if self._ended:
            held = self._held
            raise Fenced(f"job {held.job_id}: attempt {held.attempt} has ended")

    @property
    def produced_text(self) -> bool:
        return self._coalescer.deltas > 0

    def produce(self, text: str) -> None:
        """Text the job wrote: into the coalescer, and the writer told when it falls due;
        a step's is noted for its journal, and kept back while other steps run at once."""
        if self._running.keeps(text):
            return
        coalescer = self._coalescer
        idle = coalescer.due_at is None
        now = asyncio.get_running_loop().time()
        if coalescer.add(text, now) or (idle and coalescer.due_at is not None):
            self._pull.pending(now)  # a flush is due, or its time was just set

    async def progress(self, data: dict[str, Any]) -> None:
        """A `progress` event, after every token emitted before it (the log keeps their order),
        fenced by the attempt's run token."""
        held = self._held
        self._running.noted(data)

        async def append() -> None:
            async with self._pool.acquire() as conn:
                progress = [NewEvent("progress", data)]
                token = held.run_token
                await events.append(conn, held.job_id, held.attempt, progress, run_token=token)

        async with self.alone:
            with self._pull.writing_alone():
                await self._pull.idle()
                try:
                    await self._outcome.persist(self.flush_or_keep)
                    await self._outcome.persist(append)
                except Fenced:
                    self._inbox.put_nowait(LeaseLost("a progress write was refused"))
                    raise
        self._pull.pending(asyncio.get_running_loop().time())

    async def flush_or_keep(self) -> None:
        """Write every pending chunk; on a lost connection keep them (the runner's writes of a
        log in doubt, a progress event's flush) and raise."""
        chunks = self._coalescer.take()
        if not chunks:
            return
        try:
            await self._tokens.write(chunks)
        except db.DISCONNECTS:
            self._coalescer.put_back(chunks, asyncio.get_running_loop().time())
            raise

    async def earlier_cost(self) -> Decimal:
        """What the job's earlier attempts cost (its max_cost_usd counts them)."""
        held = self._held
        async with self._pool.acquire() as conn:
            cost = await conn.fetchval(queries.EARLIER_ATTEMPTS_COST, held.job_id, held.attempt)
        return Decimal(cost)
