"""The dashboard's browser test's mixed load (tests/e2e/test_admin_page.py): three tenants, the
built-in job on the simulated provider and the test app's own jobs (tests.support.user_jobs),
some succeeding, some failing at once, some dead after their attempts, one tenant refused for
its budget, and a long job left running for the page to follow and cancel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import asyncpg
import httpx

from jobstream import tenants

# A cent: a few of globex's jobs fit (the simulator's output is $2 a million tokens, each
# reserves its max_tokens' worth), then its creates are refused with 402.
GLOBEX_BUDGET_USD = Decimal("0.01")
LONG_KEY = "admin-e2e-long-job"
LONG_TICKET = "T-4242"


@dataclass
class Load:
    keys: dict[str, str]  # tenant -> API key
    ids: dict[str, list[str]] = field(default_factory=dict)  # what each job is -> its ids
    refused_for_budget: int = 0

    def one(self, what: str) -> str:
        return self.ids[what][0]


def simulated(tokens: int, tokens_per_second: float, **fields: Any) -> dict[str, Any]:
    """The built-in job, counting `tokens` on the simulated provider."""
    return {
        "prompt": "count for the operators",
        "max_tokens": tokens,
        "simulate": {
            "pattern": "count",
            "tokens": tokens,
            "tokens_per_second": tokens_per_second,
            "first_token_delay_s": 0,
        },
        **fields,
    }


def named(job: str, **job_input: Any) -> dict[str, Any]:
    return {"job": job, "input": job_input}


async def make_tenants(pool: asyncpg.Pool) -> dict[str, str]:
    async with pool.acquire() as conn:
        return {
            "acme": await tenants.create(conn, "acme"),
            "globex": await tenants.create(conn, "globex", budget_usd=GLOBEX_BUDGET_USD),
        }


class Creator:
    """POST /api/jobs as a tenant (`default`: no key, keys being off)."""

    def __init__(self, http: httpx.AsyncClient, load: Load) -> None:
        self.http = http
        self.load = load

    async def create(
        self, what: str, tenant: str, body: dict[str, Any], *, key: str | None = None
    ) -> httpx.Response:
        headers = {"Idempotency-Key": key} if key is not None else {}
        if tenant != "default":
            headers["Authorization"] = f"Bearer {self.load.keys[tenant]}"
        response = await self.http.post("/api/jobs", json=body, headers=headers)
        if response.status_code == 202:
            self.load.ids.setdefault(what, []).append(response.json()["id"])
        return response

    async def must(
        self, what: str, tenant: str, body: dict[str, Any], *, key: str | None = None
    ) -> str:
        response = await self.create(what, tenant, body, key=key)
        assert response.status_code == 202, response.text
        return str(response.json()["id"])


async def start_load(http: httpx.AsyncClient, pool: asyncpg.Pool) -> Load:
    load = Load(keys=await make_tenants(pool))
    make = Creator(http, load)
    # Left running (ten tokens a second, five minutes): the page follows its text, then
    # cancels it.
    await make.must(
        "long", "default",
        simulated(3000, 10, metadata={"ticket": LONG_TICKET}), key=LONG_KEY,
    )  # fmt: skip
    for i in range(30):  # more than a page of the default tenant's jobs
        await make.must("quick", "default", simulated(20, 0, metadata={"n": i}))
    for _ in range(3):
        await make.must("count_words", "acme", named("count_words", text="leases end"))
        await make.must("echo", "acme", named("echo", text="echo"))
    for _ in range(2):
        await make.must("permanent", "acme", named("fail", kind="permanent"))
    # A TransientError each attempt: dead after its three.
    await make.must("dead", "acme", named("fail", kind="transient"))
    # A KeyError, which the job's code did not mean: its attempts keep the traceback.
    await make.must("crashed", "acme", named("fail", kind="error"))
    await make.must("two_calls", "acme", named("two_calls", tokens=40))
    # Until the budget cannot hold one more: then 402, and the tenant's spend is what it ran.
    for _ in range(20):
        response = await make.create("globex", "globex", simulated(1000, 0))
        if response.status_code == 402:
            load.refused_for_budget += 1
            break
        assert response.status_code == 202, response.text
    assert load.refused_for_budget, "globex's budget never refused a create"
    return load
