"""Jobs as the API changes them after their create (jobstream/creates.py): cancel, an operator's
retry, delete.

What a change answers is read in its own transaction (jobstream/job_reads.py).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg

from jobstream import events, job_ids, job_reads, ledger, outbox
from jobstream.allowances import Allowance
from jobstream.clock import Clock
from jobstream.errors import JobNotFound
from jobstream.events import NewEvent
from jobstream.job_reads import Snapshot
from jobstream.rows import JobRow
from jobstream.sql import queries


async def cancel(
    pool: asyncpg.Pool, tenant_id: str, job_id: uuid.UUID, clock: Clock
) -> tuple[Snapshot, bool]:
    """Record the intent to cancel. Returns the job as this call left it, and whether this call
    changed it: one transaction decides and reads, so the two cannot disagree.

    A queued job is cancelled at once; a running one becomes `cancelling` and its worker, told by
    NOTIFY and at its next lease renewal, confirms. Anything else is left as it is.
    """
    async with pool.acquire() as conn, conn.transaction():
        job = await conn.fetchrow(queries.SELECT_JOB_FOR_UPDATE, job_id, tenant_id)
        if job is None:
            raise JobNotFound(str(job_id))
        now = clock.now()
        changed = True
        if job["status"] == "queued":
            row = await conn.fetchrow(queries.CANCEL_QUEUED, job_id, now)
            assert row is not None  # the row is locked and queued
            await ledger.release(conn, job_id)
            await outbox.record_end(conn, job_id)
            done = {"status": "cancelled", "error": row["error"]}
            await events.append(
                conn, job_id, row["attempts"], [NewEvent("done", done)], run_token=None
            )
        elif job["status"] == "running":
            row = await conn.fetchrow(queries.REQUEST_CANCEL_RUNNING, job_id, now)
            assert row is not None  # the row is locked and running
            await events.append(
                conn,
                job_id,
                row["attempts"],
                [NewEvent("status", {"status": "cancelling"})],
                run_token=None,
            )
        else:
            changed = False
        # Read again, not RETURNING: the append moved last_seq. The row lock holds the job's
        # writers off until commit, so its text, attempts and last_seq agree.
        return await job_reads.read(conn, await job_reads.get(conn, tenant_id, job_id)), changed


@dataclass(frozen=True)
class Retried:
    """An operator's retry asked of `job` (as it was when locked): the retry as it now is, and
    whether this call made it. `retry` None: the job is not dead, or its retry is gone."""

    job: JobRow
    retry: Snapshot | None
    created: bool = False


async def retry_dead(
    pool: asyncpg.Pool, tenant_id: str, job_id: uuid.UUID, clock: Clock
) -> Retried:
    """An operator's retry of a `dead` job: a new job for the same work, linked both ways.

    The dead job stays as it ended (docs/design.md, "Job states": terminal states are final):
    its log keeps its one `done` at its end, its followers and its webhook saw the end of that
    job. The new job (`retry_of` the dead one, which gains `retried_as`) has its own log,
    attempts and webhook. Returns it as this transaction leaves it, `created` False when an
    earlier retry made it (a retried request makes no second job). A retry reserves the estimate
    again, so it passes the tenant's budget and create rate as a create does (BudgetExceeded,
    RateLimited): with the tenant's own key, a retry was a way past both. Locks the dead job's
    row, then the tenant's, the order every writer keeps.
    """
    now = clock.now()
    async with pool.acquire() as conn, conn.transaction():
        record = await conn.fetchrow(queries.SELECT_JOB_FOR_UPDATE, job_id, tenant_id)
        if record is None:
            raise JobNotFound(str(job_id))
        job = JobRow.of(record)
        if job.status != "dead":
            return Retried(job, None)
        if job.retried_as is not None:
            # Locked (after the dead job, as RETRY_DEAD's order is) so that its worker's writes
            # wait: its text and last_seq are read as of one moment. Retention may have deleted
            # the retry: then there is nothing to replay.
            earlier = await conn.fetchrow(queries.SELECT_JOB_FOR_UPDATE, job.retried_as, tenant_id)
            if earlier is None:
                return Retried(job, None)
            return Retried(job, await job_reads.read(conn, JobRow.of(earlier)))
        # An operator's retry counts as a create: the same budget and rate.
        refusal = (await Allowance.locked(conn, tenant_id, now)).refusal(job.estimate_usd)
        if refusal is not None:
            raise refusal
        # A version-7 id as a create's (job_ids.py): time-ordered, so the retry sorts among the
        # jobs of its minute (the operator's list is newest first by id) and its short id is
        # its random tail like any job's.
        retry_id = uuid.UUID(job_ids.new_ids(1)[0])
        row = await conn.fetchrow(queries.RETRY_DEAD, job_id, retry_id, now)
        assert row is not None  # the row is locked, dead and not retried
        return Retried(job, await job_reads.read(conn, JobRow.of(row)), created=True)


async def delete_finished(pool: asyncpg.Pool, tenant_id: str, job_id: uuid.UUID) -> bool:
    """Delete a finished job with its log; False (and nothing deleted) if it is not finished.
    Its idempotency key is free again. Raises JobNotFound."""
    row = await pool.fetchrow(queries.DELETE_FINISHED_JOB, job_id, tenant_id)
    if row is None:
        raise JobNotFound(str(job_id))
    return bool(row["finished"])
