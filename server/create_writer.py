"""Single creates of concurrent requests, written together: one statement and one commit.

Each `POST /api/jobs` (and `POST /v1/responses`) alone was a transaction, and 32 clients at once
spent PostgreSQL's time on commits and on each other's index pages: 880 µs of backend CPU a job.
The server hands its creates to one writer (jobstream/group_write.py), which sends whatever
arrived while its previous writes were in flight as one INSERT_JOBS per tenant: 60 to 90 µs a
job. An idle server writes at once, so a lone create waits for nothing.

Every item keeps the answer a create of its own would have had: creates.create_many answers per
item, in order, with the same idempotency (two requests with one key in one statement make one
job; the second is replayed, or refused if its body differs), budget and rate rules. A statement
the database refuses is retried item by item, so only the item at fault sees the error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence

import asyncpg
import structlog

from jobstream import creates, db, new_jobs
from jobstream.clock import Clock
from jobstream.group_write import GroupWriter

log = structlog.get_logger(__name__)

# The most creates one statement writes; more wait for the next.
MAX_BATCH = 100
# Statements under way at once: while one commits, the next batch is already on its way.
WRITES_IN_FLIGHT = 2

Item = tuple[str, new_jobs.NewJob]  # (tenant, job)
Outcome = new_jobs.Created | new_jobs.Refusal
# What the writer answers an item: its outcome, or the error its statement met, which the caller
# raises as a create of its own would have (refusals are exceptions too, but returned).
Answer = Outcome | Exception


class CreateWriter:
    def __init__(
        self,
        pool: asyncpg.Pool,
        clock: Clock | None,
        announce: Callable[[Iterable[str]], None],
        *,
        storage_bytes: int | None = None,
    ) -> None:
        self._pool = pool
        self._storage_bytes = storage_bytes  # each tenant's storage bound (None: none)
        self._clock = clock
        self._announce = announce
        self._writer = GroupWriter(
            "creates", self._create_many, max_batch=MAX_BATCH, in_flight=WRITES_IN_FLIGHT
        )
        self._running = False

    async def create(self, tenant_id: str, job: new_jobs.NewJob) -> Outcome:
        """Create `job` with the others of its turn: its job, or why it was refused (a
        new_jobs.Refusal, returned); raises the database's error. Without a running writer (not
        started, or stopped), the create is written alone."""
        if self._running:
            answer = await self._writer.submit((tenant_id, job))
        else:
            [answer] = await self._create_many([(tenant_id, job)])
        if isinstance(answer, new_jobs.Created | new_jobs.Refusal):
            return answer
        raise answer

    async def run(self) -> None:
        """The writer, until cancelled."""
        self._running = True
        try:
            await self._writer.run()
        finally:
            self._running = False

    async def _create_many(self, items: Sequence[Item]) -> list[Answer]:
        """One statement per tenant (INSERT_JOBS is one tenant's), side by side. One tenant's
        failure is its items' alone: the others' jobs are made and answered."""
        by_tenant: dict[str, list[int]] = {}
        for i, (tenant_id, _) in enumerate(items):
            by_tenant.setdefault(tenant_id, []).append(i)
        outcomes: dict[int, Answer] = {}

        async def one_tenant(tenant_id: str, places: list[int]) -> None:
            try:
                made = await creates.create_many(
                    self._pool, tenant_id, [items[i][1] for i in places],
                    clock=self._clock, announce=self._announce,
                    storage_bytes=self._storage_bytes,
                )  # fmt: skip
            except db.DISCONNECTS as exc:
                # In doubt: the statement may have committed. Never written again here; each
                # caller answers as a lone create that lost its connection would.
                outcomes.update((i, exc) for i in places)
            except asyncpg.PostgresError as exc:
                if len(places) == 1:
                    outcomes[places[0]] = exc
                    return
                # The database refused the statement, which committed nothing: each item
                # alone, so that only the one at fault sees the error.
                log.warning("create_batch_refused", size=len(places), error=str(exc))
                for i in places:
                    await one_tenant(tenant_id, [i])
            except Exception as exc:  # a bug of ours: every item answers it, none written twice
                outcomes.update((i, exc) for i in places)
            else:
                outcomes.update(zip(places, made, strict=True))

        await asyncio.gather(*(one_tenant(t, places) for t, places in by_tenant.items()))
        return [outcomes[i] for i in range(len(items))]
