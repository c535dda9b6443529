"""Chaos against a real fleet (docs/design.md, invariant 10): workers killed with -9 every ~2 s,
servers killed and restarted, PostgreSQL crashed and restarted, while jobs are created through
the servers and followed over SSE by readers that reconnect. Then every promise is checked:

- every job created is terminal, and there is one job per Idempotency-Key (creates that met a
  dead server or database were retried with their key);
- a succeeded job has exactly one accepted (succeeded) attempt and the exact text; any other
  has none; the event log stands for 1..last_seq without a gap or a duplicate and ends with its
  done; money: nothing stays reserved, the tenant was charged once per accepted result;
- every follower received every event once, in order, as the log holds it, and its text is the
  log's (for a succeeded job, the result);
- no process exited on its own (only the ones killed on purpose are gone).

The janitor may compact a finished job's log at any point of the run (Plan.compact_after_s, in
a run longer than it): the log and the followers are checked in whichever shape they have, as
written, compacted or both (chaos_check.py).

The fleet and its readers are in chaos_fleet.py, the plan and the figures in chaos_plan.py.
`tests/e2e/test_chaos.py` runs a short plan; `make chaos` (tests/e2e/chaos.py) a long one.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from decimal import Decimal
from typing import Any

import asyncpg
import httpx

from jobstream import db, events
from jobstream.embedded_pg import EmbeddedPostgres
from jobstream.types import TERMINAL_STATUSES
from tests.support import chaos_check
from tests.support.chaos_fleet import Fleet, Reader
from tests.support.chaos_plan import Figures, Plan
from tests.support.http_server import http_client
from tests.support.processes import Processes
from tests.support.user_jobs import halves

TENANT = "default"


def counted(tokens: int) -> str:
    return "".join(f"{i} " for i in range(tokens))


class Chaos:
    def __init__(
        self,
        plan: Plan,
        group: Processes,
        postgres: EmbeddedPostgres,
        database_url: str,
        rng: random.Random,
    ) -> None:
        self.plan = plan
        self.fleet = Fleet(group, database_url, plan)
        self.postgres = postgres
        self.database_url = database_url
        self.rng = rng
        self.figures = Figures()
        self.stop = asyncio.Event()
        # job id -> (idempotency key, the exact text it must end with)
        self.created: dict[str, tuple[str, str]] = {}
        self.readers: list[Reader] = []
        self.clients: list[httpx.AsyncClient] = []

    async def run(self) -> Figures:
        started = time.monotonic()
        self.clients = [http_client(base_url=url, timeout=5) for url in self.fleet.urls]
        try:
            await self.fleet.start()
            # A fault that fails (a server that never came back) cancels the rest, and the body.
            async with asyncio.TaskGroup() as chaos:
                chaos.create_task(self._kill_workers(), name="kill-workers")
                chaos.create_task(self._restart_servers(), name="restart-servers")
                chaos.create_task(self._restart_postgres(), name="restart-postgres")
                chaos.create_task(self._watch_exits(), name="watch-exits")
                # Each create retries within the settle time, so the group's end is bounded.
                chaos.create_task(self._create_jobs(), name="create-jobs")
                await asyncio.sleep(self.plan.duration_s)
                # Each fault finishes what it started: PostgreSQL and every server are up after.
                self.stop.set()
            await self._settle()
        finally:
            self.stop.set()
            for reader in self.readers:
                reader.task.cancel()
            await asyncio.gather(*(r.task for r in self.readers), return_exceptions=True)
            for client in self.clients:
                await client.aclose()
        self.figures.elapsed_s = time.monotonic() - started
        return self.figures

    async def _pause(self, mean_s: float) -> bool:
        """Wait about `mean_s` (±25 %); True when the chaos is over."""
        try:
            await asyncio.wait_for(self.stop.wait(), mean_s * self.rng.uniform(0.75, 1.25))
        except TimeoutError:
            return False
        return True

    async def _kill_workers(self) -> None:
        while not await self._pause(self.plan.worker_kill_every_s):
            await self.fleet.kill_a_worker(self.rng)
            self.figures.worker_kills += 1

    async def _restart_servers(self) -> None:
        while not await self._pause(self.plan.server_restart_every_s):
            await self.fleet.restart_server(self.rng.randrange(self.plan.servers))
            self.figures.server_restarts += 1

    async def _restart_postgres(self) -> None:
        while not await self._pause(self.plan.postgres_restart_every_s):
            try:
                await asyncio.to_thread(self.postgres.stop, "immediate")
                await asyncio.sleep(self.rng.uniform(0.2, 1.0))  # down for a moment
            finally:
                # Even when cancelled: the suite's other tests share this PostgreSQL.
                await asyncio.to_thread(self.postgres.start)
            self.figures.postgres_restarts += 1

    async def _watch_exits(self) -> None:
        while not await self._pause(0.5):
            for exit_ in self.fleet.unexpected_exits():
                if exit_ not in self.figures.problems:
                    self.figures.problems.append(exit_)

    async def _create_jobs(self) -> None:
        spread_s = self.plan.duration_s * 0.8
        tasks = []
        for i in range(self.plan.jobs):
            tasks.append(asyncio.create_task(self._create(i), name=f"create-{i}"))
            await asyncio.sleep(spread_s / self.plan.jobs)
        await asyncio.gather(*tasks)

    async def _create(self, i: int) -> None:
        tokens = self.rng.randint(*self.plan.tokens)
        simulate = {"tokens": tokens, "pattern": "count", "tokens_per_second": 40,
                    "first_token_delay_s": 0}  # fmt: skip
        body: dict[str, Any] = {"prompt": f"chaos {i}", "max_tokens": tokens, "max_attempts": 10,
                                "simulate": simulate}  # fmt: skip
        expected = counted(tokens)
        if i % 3 == 2:
            # A job of the app's own (tests/support/user_jobs.py): two calls, progress between.
            body = {"job": "two_calls", "input": {"tokens": tokens}}
            expected = "".join(counted(part) for part in halves(tokens))
        key = f"chaos-{i}-{uuid.uuid4()}"
        deadline = time.monotonic() + self.plan.settle_timeout_s
        slot = i % self.plan.servers
        while True:
            try:
                response = await self.clients[slot].post(
                    "/api/jobs", json=body, headers={"Idempotency-Key": key}
                )
                if response.status_code in (200, 202):
                    break
                if response.status_code < 500:
                    self.figures.problems.append(
                        f"create {i}: {response.status_code} {response.text}"
                    )
                    return
            except httpx.TransportError:
                pass
            # The server or the database is down: the same request again, with the same key.
            if time.monotonic() > deadline:
                self.figures.problems.append(f"create {i}: no answer within the settle time")
                return
            self.figures.create_retries += 1
            slot = (slot + 1) % self.plan.servers
            await asyncio.sleep(0.2)
        job_id = response.json()["id"]
        self.created[job_id] = (key, expected)
        # Two followers, one on each server; one of them hangs up now and then on purpose.
        for k in range(2):
            client = self.clients[(i + k) % self.plan.servers]
            self.readers.append(Reader(client, job_id, choppy=k == 1, rng=self.rng))

    async def _settle(self) -> None:
        pool = await db.create_pool(self.database_url, min_size=1, max_size=4)
        try:
            await self._until_terminal(pool)
            # Late readers, one per job: a replay from the start of a finished job.
            for job_id in self.created:
                client = self.rng.choice(self.clients)
                self.readers.append(Reader(client, job_id, choppy=False, rng=self.rng))
            try:
                async with asyncio.timeout(self.plan.settle_timeout_s):
                    await asyncio.gather(*(r.task for r in self.readers))
            except TimeoutError:
                stuck = [r.job_id for r in self.readers if not r.task.done()]
                self.figures.problems.append(f"{len(stuck)} followers never ended: {stuck[:5]}")
            await self._check(pool)
        finally:
            await pool.close()

    async def _until_terminal(self, pool: asyncpg.Pool) -> None:
        ids = [uuid.UUID(job_id) for job_id in self.created]
        deadline = time.monotonic() + self.plan.settle_timeout_s
        while True:
            open_jobs = await pool.fetchval(
                "SELECT count(*) FROM jobs WHERE id = ANY($1) AND status <> ALL($2)",
                ids, list(TERMINAL_STATUSES),
            )  # fmt: skip
            if open_jobs == 0:
                return
            if time.monotonic() > deadline:
                self.figures.problems.append(f"{open_jobs} jobs not terminal after the settle time")
                return
            await asyncio.sleep(0.2)

    async def _check(self, pool: asyncpg.Pool) -> None:
        figures, problems = self.figures, self.figures.problems
        figures.jobs = len(self.created)
        figures.followers = len(self.readers)
        figures.follower_reconnects = sum(r.reconnects for r in self.readers)
        figures.follower_hangups = sum(r.hangups for r in self.readers)
        figures.follower_resyncs = sum(r.resyncs for r in self.readers)
        figures.followers_of_compacted = sum(chaos_check.compacted(r.seen) for r in self.readers)
        problems += [p for p in self.fleet.unexpected_exits() if p not in problems]
        problems += self.fleet.errors_logged()
        total = await pool.fetchval("SELECT count(*) FROM jobs WHERE tenant_id = $1", TENANT)
        if total != len(self.created):
            problems.append(f"{total} jobs stored for {len(self.created)} idempotency keys")
        logs: dict[str, tuple[list[dict[str, Any]], int, bool]] = {}
        for job_id, (_key, expected) in self.created.items():
            logs[job_id] = await self._check_job(pool, job_id, expected)
        figures.logs_compacted = sum(chaos_check.compacted(log) for log, _, _ in logs.values())
        for reader in self.readers:
            log, last_seq, sound = logs[reader.job_id]
            figures.events_checked += len(reader.seen)
            if reader.error is not None:
                problems.append(f"job {reader.job_id}: a follower was refused: {reader.error}")
            elif sound:  # a broken log is reported once, not again for each of its followers
                problems += [
                    f"job {reader.job_id}: {problem}"
                    for problem in chaos_check.follower_problems(reader.seen, log, last_seq)
                ]
        await self._check_money(pool)

    async def _check_job(
        self, pool: asyncpg.Pool, job_id: str, expected: str
    ) -> tuple[list[dict[str, Any]], int, bool]:
        """The job's log as read now, its last_seq, and whether the log passed its checks."""
        problems = self.figures.problems
        row = await pool.fetchrow("SELECT * FROM jobs WHERE id = $1", uuid.UUID(job_id))
        assert row is not None
        status = row["status"]
        self.figures.statuses[status] = self.figures.statuses.get(status, 0) + 1
        outcomes = [
            r["outcome"]
            for r in await pool.fetch(
                "SELECT outcome FROM job_attempts WHERE job_id = $1 ORDER BY attempt", row["id"]
            )
        ]
        self.figures.attempts += len(outcomes)
        self.figures.attempts_lost += outcomes.count("lost")
        accepted = outcomes.count("succeeded")
        if status not in TERMINAL_STATUSES:
            problems.append(f"job {job_id} is {status}")
        if accepted != (1 if status == "succeeded" else 0):
            problems.append(f"job {job_id} ({status}) has {accepted} accepted results: {outcomes}")
        if status == "succeeded" and row["result"]["text"] != expected:
            problems.append(f"job {job_id}: the result is not the text of {len(expected)} chars")
        # One statement: the log in one shape, as written or compacted (the janitor compacts a
        # job in one transaction).
        log = [e.to_json() for e in await events.read_after(pool, row["id"], 0, limit=100_000)]
        broken = chaos_check.log_problems(log, row["last_seq"], status)
        text = chaos_check.client_text(log)
        result: str = row["result"]["text"] if status == "succeeded" else text
        if not broken and text != result:
            at = next(
                (i for i, (a, b) in enumerate(zip(text, result, strict=False)) if a != b), None
            )
            shape = [(e["seq"], e["attempt"], e["type"]) for e in log if e["type"] != "token"]
            broken.append(
                f"the log's text is not the result ({len(text)} against {len(result)}"
                f" characters, first difference at {at}; non-token events {shape})"
            )
        problems += [f"job {job_id}: {problem}" for problem in broken]
        if row["reserved_usd"] != 0:
            problems.append(f"job {job_id} ({status}) still holds {row['reserved_usd']} USD")
        return log, row["last_seq"], not broken

    async def _check_money(self, pool: asyncpg.Pool) -> None:
        balance = await pool.fetchrow(
            "SELECT reserved_usd, spent_usd FROM tenant_balances WHERE tenant_id = $1", TENANT
        )
        charged: Decimal = await pool.fetchval(
            "SELECT coalesce(sum(charged_usd), 0) FROM jobs WHERE tenant_id = $1", TENANT
        )
        assert balance is not None
        if balance["reserved_usd"] != 0:
            self.figures.problems.append(f"the tenant still has {balance['reserved_usd']} reserved")
        if balance["spent_usd"] != charged:
            self.figures.problems.append(
                f"the tenant spent {balance['spent_usd']} but its jobs were charged {charged}"
            )
