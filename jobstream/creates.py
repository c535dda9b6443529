"""Jobs as clients create them: one, a group of single creates, or a batch; idempotent, within
the tenant's budget and create rate (jobstream/sql/creating.sql)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from decimal import Decimal
from typing import cast

import asyncpg
import structlog

from jobstream.allowances import Allowance
from jobstream.clock import Clock
from jobstream.db import Conn
from jobstream.errors import IdempotencyConflict, JobstreamError, KeyGone, StorageExceeded
from jobstream.job_ids import new_ids
from jobstream.jobspec import JobSpec
from jobstream.new_jobs import Created, NewJob, Refusal, insert_args
from jobstream.rows import JobRow
from jobstream.sql import queries

log = structlog.get_logger(__name__)

# Tries of a batch whose transaction PostgreSQL aborted to break a deadlock.
BATCH_TRIES = 3
# Tries of a create that lost a race for a key: another statement inserted it while this one ran
# (INSERT_JOBS says why that fails the statement, and why the next try does not).
KEY_RACE_TRIES = 5
# The unique index a key race fails on.
KEY_INDEX = "tenant_jobs_key_idx"
# Tries again of items whose key's job was deleted between their insert and its read.
VANISHED_TRIES = 3


async def create(
    pool: asyncpg.Pool,
    tenant_id: str,
    spec: JobSpec,
    idempotency_key: str | None,
    *,
    reserved_usd: Decimal = Decimal(0),
    clock: Clock | None = None,
    announce: Callable[[Iterable[str]], None] | None = None,
    storage_bytes: int | None = None,
) -> Created:
    """Create one job, or return the job its idempotency key already made; raises a Refusal."""
    [outcome] = await create_many(
        pool,
        tenant_id,
        [NewJob(spec, idempotency_key, reserved_usd)],
        clock=clock,
        announce=announce,
        storage_bytes=storage_bytes,
    )
    if isinstance(outcome, Created):
        return outcome
    raise outcome


async def create_many(
    pool: asyncpg.Pool,
    tenant_id: str,
    items: Sequence[NewJob],
    *,
    clock: Clock | None = None,
    announce: Callable[[Iterable[str]], None] | None = None,
    storage_bytes: int | None = None,
) -> list[Created | Refusal]:
    """Create jobs in one statement (INSERT_JOBS); the answers come in the order of `items`.

    A tenant without a budget or a create rate takes no lock: the creates of one tenant run side
    by side. A tenant with either has its row locked while its checks count, item by item.
    `announce` is told the providers of the jobs made, to wake workers (a server coalesces these
    notices); without it, this call sends the NOTIFY itself once the jobs are committed.
    `storage_bytes`: the tenant's storage bound (None: none), which refuses the items of a
    statement that would pass it.
    """
    tries = 1
    while True:
        try:
            return await _create(
                pool, tenant_id, [items], clock, announce, atomic=False,
                storage_bytes=storage_bytes,
            )  # fmt: skip
        except asyncpg.UniqueViolationError as exc:
            # It made nothing: sent again, it finds the key taken, and reads the key's job.
            if not _lost_key_race(exc) or tries == KEY_RACE_TRIES:
                raise
            tries += 1


def _lost_key_race(exc: BaseException) -> bool:
    """Did a statement fail because another took one of its keys first (INSERT_JOBS)?"""
    return isinstance(exc, asyncpg.UniqueViolationError) and exc.constraint_name == KEY_INDEX


async def create_batch(
    pool: asyncpg.Pool,
    tenant_id: str,
    chunks: Iterable[Sequence[NewJob]],
    *,
    clock: Clock | None = None,
    announce: Callable[[Iterable[str]], None] | None = None,
    on_created: Callable[[int, Created], None] | None = None,
    in_key_order: bool = False,
    rank: Callable[[int], int] | None = None,
    storage_bytes: int | None = None,
) -> list[Created | Refusal]:
    """create_many for a batch still being made: the jobs of every chunk, in one transaction,
    one statement a chunk; the answers come in the order of the chunks' items. `on_created` is
    told of each new job (its item's place, its outcome) as soon as its chunk's rows are read,
    while later chunks are written: a server builds its answers meanwhile. A call that then
    fails has made none of them. `rank` gives an item's place in the request where the chunks
    come in another order: a tenant's budget and create rate go to the earliest items.

    Each chunk is taken from `chunks` while the statement of the one before runs, so whatever
    makes a chunk (a server validating a request's items) works while PostgreSQL writes. One
    statement for a whole batch of 1,000 left each idle in turn: the server's 32 ms of checks,
    then the database's 45 ms of writing. The transaction keeps the batch whole: a batch that
    fails midway has made none of its jobs.

    The keys are taken in key order across the whole transaction, and the reservations booked
    after the last: two batches that took the same keys in opposite orders, a chunk at a time,
    each held keys the other waited for (INSERT_JOBS says more), and CI saw three tries in a row
    end that way. `in_key_order`: the caller sends the keyed items in ascending key order across
    chunks (a ValueError if not), and they are written as they come; otherwise they wait for one
    last statement, which no longer overlaps the making of the chunks. A try PostgreSQL still
    aborts for a deadlock (a writer outside the key order) is made again, whole, up to
    BATCH_TRIES: `on_created` may then have heard of jobs of the aborted try, and the outcomes
    returned are the ones that count.
    """
    read: list[Sequence[NewJob]] = []
    unread = iter(chunks)

    def again() -> Iterator[Sequence[NewJob]]:
        """The chunks an earlier try read, then the rest, kept for a later try."""
        yield from list(read)
        for chunk in unread:
            read.append(chunk)
            yield chunk

    tries = races = 1
    while True:
        try:
            return await _create(
                pool, tenant_id, again(), clock, announce,
                atomic=True, on_created=on_created, in_key_order=in_key_order, rank=rank,
                storage_bytes=storage_bytes,
            )  # fmt: skip
        except asyncpg.DeadlockDetectedError:
            # PostgreSQL aborted this one's transaction: it made nothing, so it is written
            # again, whole.
            if tries == BATCH_TRIES:
                raise
            log.warning(
                "create_batch_deadlock", tenant_id=tenant_id, tries_left=BATCH_TRIES - tries
            )
            tries += 1
        except asyncpg.UniqueViolationError as exc:
            # Another statement took one of its keys while it ran: it made nothing, and written
            # again, whole, it finds that key taken (INSERT_JOBS).
            if not _lost_key_race(exc) or races == KEY_RACE_TRIES:
                raise
            races += 1


async def _create(
    pool: asyncpg.Pool,
    tenant_id: str,
    chunks: Iterable[Sequence[NewJob]],
    clock: Clock | None,
    announce: Callable[[Iterable[str]], None] | None,
    *,
    atomic: bool,
    on_created: Callable[[int, Created], None] | None = None,
    in_key_order: bool = False,
    rank: Callable[[int], int] | None = None,
    storage_bytes: int | None = None,
    tries_left: int = VANISHED_TRIES,
) -> list[Created | Refusal]:
    now = clock.now() if clock is not None else None
    made = _Made(tenant_id, on_created, rank, storage_bytes)
    async with (
        pool.acquire() as conn,
        conn.transaction() if atomic else contextlib.nullcontext(),
    ):
        await _insert_chunks(
            conn, made, chunks, now, book=not atomic, keys_last=atomic and not in_key_order
        )
        if made.held:
            # A tenant with limits: its items go the locked path, in a transaction.
            async with contextlib.nullcontext() if atomic else conn.transaction():
                await _create_held(conn, made, now)
        if made.unbooked or made.unbooked_bytes:
            await conn.execute(queries.BOOK_RESERVED, tenant_id, made.unbooked, made.unbooked_bytes)
        # A fresh statement: its snapshot sees the rows that made the keys taken.
        taken = [made.items[i].idempotency_key for i, o in enumerate(made.outcomes) if o is None]
        existing = (
            {r["idempotency_key"]: r for r in await conn.fetch(
                queries.SELECT_JOBS_BY_KEYS, tenant_id, taken)}
            if taken else {}
        )  # fmt: skip
        missing = [key for key in taken if key not in existing]
        buried = (
            {r["idempotency_key"]: r for r in await conn.fetch(
                queries.TOMBSTONES_BY_KEYS, tenant_id, missing)}
            if missing else {}
        )  # fmt: skip
    if made.providers:
        if announce is not None:
            announce(made.providers)
        else:
            await pool.execute(queries.NOTIFY_RUNNABLE, sorted(made.providers))
    outcomes: list[Created | Refusal | None] = [
        outcome if outcome is not None else _existing(made, i, existing, buried)
        for i, outcome in enumerate(made.outcomes)
    ]
    vanished = [i for i, outcome in enumerate(outcomes) if outcome is None]
    if vanished:
        # Their keys were taken when INSERT_JOBS ran and their jobs gone when read: deleted in
        # between (DELETE /v1/responses/{id}, or retention with tombstones off), so the keys
        # are free again and the items are created anew, as they would have been a moment
        # later.
        if tries_left == 0:
            raise JobstreamError(f"the jobs of {len(vanished)} idempotency keys keep vanishing")
        log.info("create_key_vanished", tenant_id=tenant_id, items=len(vanished))
        again = await _create(
            pool, tenant_id, [[made.items[i] for i in vanished]], clock, announce,
            atomic=False, storage_bytes=storage_bytes, tries_left=tries_left - 1,
        )  # fmt: skip
        for i, outcome in zip(vanished, again, strict=True):
            outcomes[i] = outcome
            if made.on_created is not None and isinstance(outcome, Created) and outcome.created:
                made.on_created(i, outcome)  # as every new job of the batch is told
    return cast(list[Created | Refusal], outcomes)


class _Made:
    """A create's items so far, and what became of each: an outcome once its job is made or it
    is refused, None while its key's job is still to be read (or it waits for the locked path,
    its place in `held`)."""

    def __init__(
        self,
        tenant_id: str,
        on_created: Callable[[int, Created], None] | None = None,
        rank: Callable[[int], int] | None = None,
        storage_bytes: int | None = None,
    ) -> None:
        self.tenant_id = tenant_id
        self.storage_bytes = storage_bytes
        self.on_created = on_created
        self.rank = rank  # an item's place in the request, where it differs
        self.items: list[NewJob] = []
        self.ids: list[str] = []
        self.outcomes: list[Created | Refusal | None] = []
        self.held: list[int] = []
        self.providers: set[str] = set()
        # What the jobs made so far reserve and store, and INSERT_JOBS did not book (a batch's
        # statements).
        self.unbooked = Decimal(0)
        self.unbooked_bytes = 0
        # Items of a statement that would have passed the storage bound: refused unless their
        # key made a job already.
        self.over_storage: set[int] = set()

    def add(self, chunk: Sequence[NewJob]) -> range:
        """Take in a chunk, each item with a new id: its items' places."""
        start = len(self.items)
        self.items.extend(chunk)
        self.ids.extend(new_ids(len(chunk)))
        self.outcomes.extend([None] * len(chunk))
        return range(start, start + len(chunk))

    def inserted(
        self, places: Sequence[int], rows: Iterable[asyncpg.Record], *, booked: bool = True
    ) -> None:
        """The rows INSERT_JOBS made for the items at `places` (an item with no row: its key
        was taken); `booked` False: their reservations are still to book."""
        by_id = {str(r["id"]): r for r in rows if r["id"] is not None}
        for i in places:
            row = by_id.get(self.ids[i])
            if row is not None:
                item = self.items[i]
                if not booked:
                    self.unbooked += item.reserved_usd
                    self.unbooked_bytes += item.input_bytes
                created = Created(
                    JobRow.inserted(
                        row, self.tenant_id, item.idempotency_key, item.request_hash,
                        item.payload, item.spec, item.reserved_usd,
                    ),
                    created=True,
                )  # fmt: skip
                self.outcomes[i] = created
                self.providers.add(item.spec.provider)
                if self.on_created is not None:
                    self.on_created(i, created)


async def _insert_chunks(
    conn: Conn,
    made: _Made,
    chunks: Iterable[Sequence[NewJob]],
    now: datetime | None,
    *,
    book: bool,
    keys_last: bool,
) -> None:
    """INSERT_JOBS for each chunk, each sent before the next chunk is taken from `chunks`.
    `book` False (a transaction of several statements): the statements leave the reservations
    to book (made.unbooked). `keys_last`: the keyed items go in one statement after all the
    others; else their keys must ascend from chunk to chunk."""
    writing: asyncio.Task[list[asyncpg.Record]] | None = None
    places: Sequence[int] = ()  # the items of the statement in flight
    try:
        for now_places in _statements(made, chunks, keys_last):
            rows = await writing if writing is not None else None
            written, places = places, now_places
            args = insert_args(
                [made.ids[i] for i in places], made.tenant_id, [made.items[i] for i in places],
                now, book=book, storage_bytes=made.storage_bytes,
            )  # fmt: skip
            writing = asyncio.ensure_future(conn.fetch(queries.INSERT_JOBS, *args))
            # The task's first step sends a prepared statement; then the rows of the statement
            # before are read, and the next chunk made, while this one runs.
            await asyncio.sleep(0)
            if rows is not None:
                _written(made, written, rows, booked=book)
        if writing is not None:
            _written(made, places, await writing, booked=book)
    finally:
        if writing is not None:
            if not writing.done():
                # Making a chunk failed: the statement ends before the connection is used again.
                await asyncio.wait([writing])
            if not writing.cancelled():
                writing.exception()  # retrieved: the error that ended the loop is the one raised


def _statements(
    made: _Made, chunks: Iterable[Sequence[NewJob]], keys_last: bool
) -> Iterator[Sequence[int]]:
    """The places of each statement's items, each chunk taken from `chunks` only when asked
    for; with `keys_last`, the keyed items of every chunk come last, in one statement."""
    keyed: list[int] = []
    highest = ""  # the highest key sent so far
    for chunk in chunks:
        places: Sequence[int] = made.add(chunk)
        if keys_last:
            items = made.items
            keyed.extend(i for i in places if items[i].idempotency_key is not None)
            places = [i for i in places if items[i].idempotency_key is None]
        else:
            keys = [item.idempotency_key for item in chunk if item.idempotency_key is not None]
            # Compared as Python compares str, by code point, as COLLATE "C" compares UTF-8.
            if keys and min(keys) < highest:
                raise ValueError("the keyed items of a batch must come in ascending key order")
            highest = max(keys, default=highest)
        if places:
            yield places
    if keyed:
        yield keyed


def _written(
    made: _Made, places: Sequence[int], rows: Sequence[asyncpg.Record], *, booked: bool
) -> None:
    if not rows:
        raise JobstreamError(f"tenant {made.tenant_id!r} does not exist")
    if not rows[0]["fits"]:
        made.over_storage.update(places)
    elif rows[0]["go"]:
        made.inserted(places, rows, booked=booked)
    else:
        made.held.extend(places)


async def _create_held(conn: Conn, made: _Made, now: datetime | None) -> None:
    """The locked path for the items INSERT_JOBS left to it (a tenant with limits), checked in
    request order, which a batch's chunks may not follow."""
    held = sorted(made.held, key=made.rank)
    rows, refused = await _create_checked(
        conn, made.tenant_id, [made.ids[i] for i in held], [made.items[i] for i in held], now,
        storage_bytes=made.storage_bytes,
    )  # fmt: skip
    made.inserted(held, rows)
    for j, refusal in refused.items():
        made.outcomes[held[j]] = refusal


async def _create_checked(
    conn: Conn,
    tenant_id: str,
    ids: list[str],
    items: Sequence[NewJob],
    now: datetime | None,
    *,
    storage_bytes: int | None = None,
) -> tuple[list[asyncpg.Record], dict[int, Refusal]]:
    """The locked path: the tenant's budget and create rate, checked item by item in order.
    Returns the rows made and the refusals, by the item's place in `items`."""
    allowance = await Allowance.locked(conn, tenant_id, now)
    keys = [item.idempotency_key for item in items if item.idempotency_key is not None]
    # Replays cost nothing and count for nothing: the rows behind them exist already.
    seen = {
        r["idempotency_key"]
        for r in (await conn.fetch(queries.SELECT_JOBS_BY_KEYS, tenant_id, keys) if keys else [])
    }
    refused: dict[int, Refusal] = {}
    admitted: list[int] = []
    keys_admitted: set[str] = set()
    for i, item in enumerate(items):
        key = item.idempotency_key
        if key is not None and (key in seen or key in keys_admitted):
            admitted.append(i)  # a replay, or a duplicate within this batch: no new row
            continue
        refusal = allowance.refusal(item.reserved_usd)
        if refusal is not None:
            refused[i] = refusal
            continue
        admitted.append(i)
        if key is not None:
            keys_admitted.add(key)
        allowance.take(item.reserved_usd)
    if not admitted:
        return [], refused
    chosen = [items[i] for i in admitted]
    chosen_ids = [ids[i] for i in admitted]
    rows = await conn.fetch(
        queries.INSERT_JOBS,
        *insert_args(chosen_ids, tenant_id, chosen, now, locked=True, storage_bytes=storage_bytes),
    )
    if rows and not rows[0]["fits"]:
        # Replays are read as every taken key is; the rest are refused.
        over = {i: _over_storage(storage_bytes) for i in admitted if items[i].idempotency_key
                not in seen}  # fmt: skip
        return [], refused | over
    return rows, refused


def _existing(
    made: _Made,
    place: int,
    existing: dict[str, asyncpg.Record],
    buried: dict[str, asyncpg.Record],
) -> Created | Refusal | None:
    """What an item whose insert made no job gets: the job its key made, a conflict, the
    deleted job its key made (KeyGone), the storage bound; None when its key's job vanished
    between the insert and this read (the caller tries the item again)."""
    item = made.items[place]
    key = item.idempotency_key
    found = existing.get(key) if key is not None else None
    if found is not None:
        if not item.same_request(found["request_hash"]):
            return IdempotencyConflict(
                f"Idempotency-Key {key!r} was used with a different request body"
            )
        return Created(JobRow.of(found), created=False)
    tomb = buried.get(key) if key is not None else None
    if tomb is not None:
        if not item.same_request(tomb["request_hash"] or ""):
            return IdempotencyConflict(
                f"Idempotency-Key {key!r} was used with a different request body"
            )
        return KeyGone(
            f"Idempotency-Key {key!r} made job {tomb['id']}, which retention deleted at "
            f"{tomb['deleted_at'].isoformat()}; the key makes no new job while its tombstone "
            "is kept",
            job_id=str(tomb["id"]),
        )
    if place in made.over_storage:
        return _over_storage(made.storage_bytes)
    if key is None:
        raise JobstreamError("an item without a key made no job")
    return None


def _over_storage(limit: int | None) -> StorageExceeded:
    return StorageExceeded(
        f"the tenant's jobs may store at most {limit:,} bytes of input; delete finished jobs "
        "or wait for retention",
        limit_bytes=limit or 0,
    )
