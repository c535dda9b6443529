"""What a tenant with limits may still create: the room left in its create rate and in its
budget, read under its row lock (TENANT_FOR_CREATE) so that each create counts every one
committed before it. The rules of creates (jobstream/creates.py) and of an operator's retry of
a dead job (jobstream/jobs.py), which counts as a create."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from jobstream.db import Conn
from jobstream.errors import BudgetExceeded, JobstreamError, RateLimited
from jobstream.sql import queries


@dataclass
class Allowance:
    per_min: int | None  # the tenant's create rate; None: no rate
    rate_room: int | None  # creates the rate still allows this minute
    frees_in_s: float  # when the rate's window frees a create: the Retry-After
    budget_left: Decimal | None  # None: no budget

    @classmethod
    async def locked(cls, conn: Conn, tenant_id: str, now: datetime | None) -> Allowance:
        """Lock the tenant's row (until the transaction ends) and read what it may create."""
        tenant = await conn.fetchrow(queries.TENANT_FOR_CREATE, tenant_id)
        if tenant is None:
            raise JobstreamError(f"tenant {tenant_id!r} does not exist")
        per_min: int | None = tenant["create_rate_per_min"]
        rate_room: int | None = None
        frees_in_s = 0.0
        if per_min is not None:
            window = await conn.fetchrow(queries.TENANT_RECENT_CREATES, tenant_id, now)
            assert window is not None  # an aggregate's one row
            rate_room = per_min - window["recent"]
            frees_in_s = max(1.0, window["frees_in_s"])
        budget_left: Decimal | None = None
        if tenant["budget_usd"] is not None:
            budget_left = await conn.fetchval(queries.TENANT_BUDGET_LEFT, tenant_id)
        return cls(per_min, rate_room, frees_in_s, budget_left)

    def refusal(self, reserved_usd: Decimal) -> RateLimited | BudgetExceeded | None:
        """Why one more job reserving `reserved_usd` may not be created now; None if it may."""
        if self.rate_room is not None and self.rate_room <= 0:
            return RateLimited(
                f"at most {self.per_min} jobs a minute may be created",
                retry_after_s=self.frees_in_s,
            )
        if self.budget_left is not None and reserved_usd > self.budget_left:
            left = max(self.budget_left, Decimal(0))
            return BudgetExceeded(
                f"the job may cost up to ${reserved_usd:.6f}; ${left:.6f} of budget is left"
            )
        return None

    def take(self, reserved_usd: Decimal) -> None:
        """Count one more job, reserving `reserved_usd`, as created."""
        if self.rate_room is not None:
            self.rate_room -= 1
        if self.budget_left is not None:
            self.budget_left -= reserved_usd
