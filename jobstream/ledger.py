"""The tenant's money: reserve at create, charge once per accepted result, release otherwise.

A job's reservation is booked by the statement that creates it (queries.INSERT_JOBS; a batch's
by one BOOK_RESERVED after its last key, jobstream/creates.py), its charge
by the one that accepts its result (queries.SUCCEED_ATTEMPTS); the release here runs inside the
transaction that changes the job's status, so the ledger and the job never disagree
(docs/design.md, "Money: the ledger"). Each connection books on its own row of the tenant
(jobstream/sql/ledger.sql): the jobs of one tenant finishing at once on several connections do
not queue behind one row.
"""

from __future__ import annotations

import uuid

from jobstream.db import Conn
from jobstream.sql import queries


async def release(conn: Conn, job_id: uuid.UUID) -> None:
    await conn.execute(queries.RELEASE_RESERVATION, job_id)
