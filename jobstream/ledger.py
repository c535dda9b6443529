"""The tenant's money: reserve at create, charge once per accepted result, release otherwise.

Every function runs inside the transaction that changes the job's status, so the ledger and
the job never disagree (DESIGN.md §4.7).
"""

from __future__ import annotations

import uuid
from decimal import Decimal

from jobstream import queries
from jobstream.db import Conn
from jobstream.errors import BudgetExceeded


async def reserve(conn: Conn, tenant_id: str, amount: Decimal) -> None:
    if await conn.fetchval(queries.RESERVE_BUDGET, tenant_id, amount) is None:
        row = await conn.fetchrow(queries.SELECT_TENANT_BUDGET, tenant_id)
        left = (
            row["budget_usd"] - row["spent_usd"] - row["reserved_usd"]
            if row is not None and row["budget_usd"] is not None
            else Decimal(0)
        )
        left = max(left, Decimal(0))
        raise BudgetExceeded(f"the job may cost up to ${amount:.6f}; ${left:.6f} of budget is left")


async def charge(conn: Conn, job_id: uuid.UUID, price: Decimal) -> None:
    await conn.execute(queries.CHARGE_JOB, job_id, price)


async def release(conn: Conn, job_id: uuid.UUID) -> None:
    await conn.execute(queries.RELEASE_RESERVATION, job_id)


async def reserve_again(conn: Conn, job_id: uuid.UUID) -> None:
    await conn.execute(queries.RESERVE_AGAIN, job_id)
