"""The worker processes as the database knows them: one `workers` row each (schema.sql).

A worker writes its row at start, keeps `heartbeat_at` fresh while it runs (its lease renewals
carry the heartbeat, an idle worker sends `heartbeat` on the same tick) and sets `stopped_at`
when it exits cleanly. The live rows' slots are the fleet, which a claim shares among tenants
that have no running limit of their own (claim_jobs); an operator reads the same rows to see
which workers run, which jobs each runs, and with what version.
"""

from __future__ import annotations

import importlib.metadata
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from jobstream.clock import Clock
from jobstream.db import Queryable
from jobstream.sql import queries


@dataclass(frozen=True)
class WorkerProcess:
    """What a worker announces of itself."""

    id: str
    host: str
    pid: int
    version: str  # jobstream's package version
    job_names: Sequence[str]  # the names it claims
    slots: int  # attempts it runs at once (JOBSTREAM_WORKER_CONCURRENCY)

    @classmethod
    def this_process(cls, worker_id: str, job_names: Sequence[str], slots: int) -> WorkerProcess:
        return cls(
            id=worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            version=_version(),
            job_names=tuple(job_names),
            slots=slots,
        )


def _version() -> str:
    try:
        return importlib.metadata.version("jobstream")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"  # run from a checkout that was never installed: still a worker


async def register(conn: Queryable, worker: WorkerProcess, clock: Clock) -> None:
    """The worker's row, started and alive now (REGISTER_WORKER): its slots join the fleet."""
    await conn.execute(
        queries.REGISTER_WORKER,
        worker.id,
        worker.host,
        worker.pid,
        worker.version,
        list(worker.job_names),
        worker.slots,
        clock.now(),
    )


async def heartbeat(conn: Queryable, worker: WorkerProcess, clock: Clock) -> None:
    """An idle worker's sign of life; a busy one's rides on its lease renewals (RENEW_LEASES)."""
    if await conn.fetchval(queries.WORKER_HEARTBEAT, worker.id, clock.now()) is None:
        # The row was deleted while we ran: without it our slots are missing from the fleet,
        # and tenants' fair shares would shrink. Written again (started_at then says when).
        await register(conn, worker, clock)


async def stopped(conn: Queryable, worker_id: str, clock: Clock) -> None:
    """A clean exit: the worker's slots leave the fleet now rather than a lease later."""
    await conn.execute(queries.WORKER_STOPPED, worker_id, clock.now())


WorkerState = Literal["live", "stale", "stopped"]


@dataclass(frozen=True)
class RunningAttempt:
    job_id: str
    job_name: str
    attempt: int


@dataclass(frozen=True)
class WorkerView:
    """A worker as an operator sees it: its row, its state, the attempts it runs."""

    id: str
    host: str
    pid: int
    version: str
    job_names: list[str]
    slots: int
    started_at: datetime
    heartbeat_at: datetime
    stopped_at: datetime | None
    state: WorkerState  # stopped (a clean exit), stale (no heartbeat for the window), live
    running: list[RunningAttempt] = field(default_factory=list)


async def fleet(conn: Queryable, clock: Clock, *, stale_after_s: float) -> list[WorkerView]:
    """Every worker row the janitor keeps, newest first, each with the attempts it runs: two
    reads, the workers and the attempts under way (the running jobs' index), whatever the
    history. An attempt whose worker has no row (pruned, or deleted by hand) is not shown."""
    rows = await conn.fetch(queries.ADMIN_WORKERS, stale_after_s, clock.now())
    running: dict[str, list[RunningAttempt]] = {}
    for r in await conn.fetch(queries.ADMIN_RUNNING_ATTEMPTS):
        running.setdefault(r["worker_id"], []).append(
            RunningAttempt(str(r["job_id"]), r["job_name"], r["attempt"])
        )
    return [
        WorkerView(
            r["id"],
            r["host"],
            r["pid"],
            r["version"],
            list(r["job_names"]),
            r["slots"],
            r["started_at"],
            r["heartbeat_at"],
            r["stopped_at"],
            r["state"],
            running.get(r["id"], []),
        )
        for r in rows
    ]
