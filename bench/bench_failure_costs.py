"""What each provider failure costs: one job per failure kind, run by a worker on the OpenAI
provider against the fake OpenAI server (real HTTP, loopback), with the default job policy.

    .venv/bin/python -m bench.bench_failure_costs     (or `make bench` for every benchmark)

Prints one row per failure kind: the job's end, its attempts and the wait before the retry, the
provider cost we recorded and whether it is known, what the fake provider billed, and what the
tenant was charged (backoff is 0 here, so a wait is Retry-After's). Prices are
the tests' (2.50 USD per million input tokens, 10 per million output tokens); answers are 8
tokens. Uses DATABASE_URL when set (it must allow CREATE DATABASE), else an embedded PostgreSQL.
Takes a few seconds: the 429 asks for a one-second wait.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import asyncpg

from jobstream import db, logs
from jobstream.settings import Settings
from jobstream.worker.worker import Worker
from tests.support import database
from tests.support.fake_openai import FakeOpenAI, Reply
from tests.support.openai_jobs import (
    billed_usd,
    create_openai_job,
    openai_settings,
)
from tests.support.polling import eventually

PROMPT = "Summarise the quarterly report in three short bullet points"


@dataclass(frozen=True)
class Case:
    name: str
    reply: Reply
    job: dict[str, Any]


CASES = (
    Case("429, Retry-After: 1", Reply(kind="error", status=429, retry_after="1"), {}),
    Case("500", Reply(kind="error", status=500), {}),
    Case("400", Reply(kind="error", status=400), {}),
    Case("malformed chunk after 3 tokens", Reply(kind="malformed", after_tokens=3), {}),
    Case("hang after 3 tokens", Reply(kind="hang", after_tokens=3), {}),
    Case("disconnect after 3 tokens", Reply(kind="disconnect", after_tokens=3), {}),
    Case(
        "disconnect after 3, retry_unknown",
        Reply(kind="disconnect", after_tokens=3),
        {"retry_unknown": True},
    ),
)


def main() -> None:
    logs.configure("warning", json=False)
    # The fake's uvicorn complains about the disconnect it stages on purpose.
    logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)
    with database.postgres_server() as (admin_url, _):
        asyncio.run(_run(admin_url))


async def _run(admin_url: str) -> None:
    await database.create_template(admin_url)
    url = await database.create_test_database(admin_url)
    try:
        async with FakeOpenAI() as fake:
            settings = openai_settings(
                Settings(database_url=url, poll_interval_s=0.1, backoff_base_s=0, backoff_max_s=0),
                fake.base_url,
            )
            pool = await db.create_pool(url, min_size=1, max_size=8)
            try:
                rows = await _measure(pool, settings, fake)
            finally:
                await pool.close()
    finally:
        await database.drop_test_database(admin_url, url)
    _print(rows)


async def _measure(pool: asyncpg.Pool, settings: Settings, fake: FakeOpenAI) -> list[list[str]]:
    worker = Worker(settings, pool=pool)
    running = asyncio.create_task(worker.run(), name="bench-worker")
    try:
        # One case at a time, each with the same prompt and a scripted first reply (a marker
        # in the prompt would weigh on our estimate of its tokens).
        return [await _one(pool, settings, fake, case) for case in CASES]
    finally:
        worker.stop()
        await running


async def _one(pool: asyncpg.Pool, settings: Settings, fake: FakeOpenAI, case: Case) -> list[str]:
    fake.reset()
    fake.push(case.reply)
    job_id = await create_openai_job(pool, settings, PROMPT, **case.job)
    job = await eventually(
        lambda: pool.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id),
        lambda row: row is not None and row["finished_at"] is not None,
        what=f"the {case.name} job finished",
        timeout_s=30,
        interval_s=0.05,
    )
    assert job is not None
    await fake.wait_until(lambda s: s.in_flight == 0)
    attempts = await pool.fetch(
        "SELECT * FROM job_attempts WHERE job_id = $1 ORDER BY attempt", job_id
    )
    cost = sum((a["cost_usd"] for a in attempts), start=Decimal(0))
    waited = (
        f"{(attempts[1]['started_at'] - attempts[0]['finished_at']).total_seconds():.2f}"
        if len(attempts) > 1
        else "-"
    )
    return [
        case.name,
        f"{job['status']} ({job['error']['class'] if job['error'] else 'ok'})",
        " + ".join(a["outcome"] for a in attempts),
        waited,
        _usd(job["estimate_usd"]),
        _usd(cost),
        ", ".join(str(a["cost_known"]).lower() for a in attempts),
        _usd(billed_usd(fake.stats().records)),
        _usd(job["charged_usd"] or Decimal(0)),
    ]


def _usd(amount: Decimal) -> str:
    return f"{amount * 1_000_000:.2f}"


def _print(rows: list[list[str]]) -> None:
    header = [
        "failure",
        "job ends",
        "attempts",
        "retry after s",
        "reserved µ$",
        "cost recorded µ$",
        "cost_known",
        "billed by provider µ$",
        "tenant charged µ$",
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print("bench_failure_costs (µ$ = millionths of a USD; the tenant's reservation is released")
    print("on every end but success, where it pays the accepted attempt's price only;")
    print("recorded costs that are not known are our estimate: prompt characters / 4)")
    for row in [header, ["-" * w for w in widths], *rows]:
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |")


if __name__ == "__main__":
    main()
