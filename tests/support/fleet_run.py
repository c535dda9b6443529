"""The fleet test (`make fleet`, tests/e2e/fleet.py): the topology of docs/deployment.md on real
parts, under load, through a rolling deploy and a PostgreSQL restart, then every promise checked.

PostgreSQL (the embedded server), PgBouncer in transaction mode (DATABASE_URL through it,
JOBSTREAM_DIRECT_DATABASE_URL direct), nginx in front of two `jobstream server` processes, three
`jobstream worker` processes, all on loopback. Jobs (the built-in simulated one and the test
app's `two_calls`) are created through nginx with an Idempotency-Key, some followed over SSE
through nginx by readers that reconnect with Last-Event-ID. Meanwhile each server is restarted
in turn (SIGTERM, its drain, start, ready), then each worker (SIGTERM, its grace, start), then
PostgreSQL once. Every failed request is counted against the phase it fell in: a 5xx, a 429 or
a refused connection is an error; a stream the server ended early (its drain) and a reconnect
with Last-Event-ID is not. Only the PostgreSQL restart may see errors.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from jobstream import db
from jobstream.embedded_pg import EmbeddedPostgres
from jobstream.follower import Follower
from jobstream.ports import free_port
from jobstream.types import TERMINAL_STATUSES
from tests.support import chaos_check
from tests.support.fleet_plan import DATABASE_DOWN, Figures, Phase, Plan
from tests.support.fleet_topology import (
    MIGRATE_COMMAND,
    SERVER_COMMAND,
    SERVER_ENV,
    SHARED_ENV,
    WORKER_COMMAND,
    WORKER_ENV,
)
from tests.support.nginx import Nginx
from tests.support.processes import ManagedProcess, Processes
from tests.support.user_jobs import halves


def counted(tokens: int) -> str:
    return "".join(f"{i} " for i in range(tokens))


class FleetRun:
    def __init__(
        self,
        plan: Plan,
        group: Processes,
        postgres: EmbeddedPostgres | None,  # None: a plan that does not restart it
        direct_url: str,
        pooled_url: str,
        nginx_prefix: Path,
        rng: random.Random,
    ) -> None:
        self.plan = plan
        self.group = group
        self.postgres = postgres
        self.direct_url = direct_url
        self.rng = rng
        self.figures = Figures()
        self.phase = Phase(self.figures)
        self.ports = [free_port() for _ in range(2)]
        self.env = {
            **SHARED_ENV,
            "DATABASE_URL": pooled_url,
            "JOBSTREAM_DIRECT_DATABASE_URL": direct_url,
            # One key for every server: any of them accepts any events_url token.
            "JOBSTREAM_SECRET_KEY": "fleet",
            # The test app's jobs beside the built-in one.
            "JOBSTREAM_APP": "tests.support.user_jobs:app",
            "FORWARDED_ALLOW_IPS": "127.0.0.1",
        }
        self.nginx_prefix = nginx_prefix
        self.nginx_port = free_port()
        self.servers: list[ManagedProcess] = []
        self.workers: list[ManagedProcess] = []
        self.everyone: list[ManagedProcess] = []
        self.stopped: set[int] = set()  # pids we stopped on purpose
        self.created: dict[str, tuple[str, str]] = {}  # job id -> (key, expected text)
        self.followers: list[tuple[str, asyncio.Task[list[dict[str, Any]]]]] = []
        # When PostgreSQL was restarted, to the servers' readiness after (wall clock: the logs').
        self.restart_window: tuple[datetime, datetime] | None = None
        self._spawned = 0

    # -- processes ------------------------------------------------------------------------

    def _spawn(self, kind: str, env: dict[str, str], command: tuple[str, ...]) -> ManagedProcess:
        self._spawned += 1
        process = self.group.spawn(kind, env, name=f"{kind}-{self._spawned}", command=command)
        self.everyone.append(process)
        return process

    def _server(self, slot: int) -> ManagedProcess:
        env = {**self.env, **SERVER_ENV, "JOBSTREAM_PORT": str(self.ports[slot])}
        return self._spawn("server", env, SERVER_COMMAND)

    def _worker(self) -> ManagedProcess:
        env = {**self.env, **WORKER_ENV, "JOBSTREAM_WORKER_ID": f"w{self._spawned + 1}"}
        return self._spawn("worker", env, WORKER_COMMAND)

    async def _ready(self, slot: int, timeout_s: float = 60) -> None:
        """Until the server on `slot` answers /readyz itself (not through nginx)."""
        server = self.servers[slot]
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{self.ports[slot]}") as c:
            while True:
                if server.returncode is not None:
                    raise AssertionError(f"{server.name} exited: {server.output()[-2000:]}")
                try:
                    if (await c.get("/readyz", timeout=2)).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError(f"{server.name} not ready within {timeout_s} s")
                await asyncio.sleep(0.05)

    async def _stop(self, process: ManagedProcess, timeout_s: float) -> float:
        """SIGTERM and wait for the exit; how long it took."""
        started = time.monotonic()
        self.stopped.add(process.pid)
        process.terminate()
        code = await process.wait_async(timeout_s)
        # uvicorn ends by raising the SIGTERM again once it has shut down (-15): a clean stop.
        if code not in (0, -15):
            self.figures.problems.append(f"{process.name} exited {code} after SIGTERM")
        return time.monotonic() - started

    async def _roll_servers(self) -> None:
        for slot in range(self.plan.servers_rolled):
            started = time.monotonic()
            drained = await self._stop(self.servers[slot], 30)
            self.servers[slot] = self._server(slot)
            await self._ready(slot)
            self.figures.restarts.append(
                f"server {slot}: drained in {drained:.1f} s, serving again after"
                f" {time.monotonic() - started:.1f} s"
            )

    async def _roll_workers(self) -> None:
        for i in range(self.plan.workers_rolled):
            started = time.monotonic()
            old = self.workers[i]
            # The new one first, started, then the old one stopped: capacity never drops by two.
            self.workers[i] = self._worker()
            await self.workers[i].wait_for_log("worker_started", timeout_s=60)
            graced = await self._stop(old, 60)
            self.figures.restarts.append(
                f"worker {i}: stopped in {graced:.1f} s ({time.monotonic() - started:.1f} s)"
            )

    async def _restart_postgres(self) -> None:
        self.restart_window = (datetime.now(UTC), datetime.max.replace(tzinfo=UTC))
        started = time.monotonic()
        postgres = self.postgres
        assert postgres is not None
        try:
            await asyncio.to_thread(postgres.stop, "fast")
        finally:
            # Even when cancelled: nothing else can run on a stopped cluster.
            await asyncio.to_thread(postgres.start)
        down = time.monotonic() - started
        # The window ends once both servers find the database again.
        await asyncio.gather(*(self._ready(slot) for slot in range(len(self.servers))))
        self.restart_window = (self.restart_window[0], datetime.now(UTC))
        self.figures.restarts.append(
            f"postgres: down {down:.1f} s, servers ready after {time.monotonic() - started:.1f} s"
        )

    # -- the run --------------------------------------------------------------------------

    async def run(self) -> Figures:
        started = time.monotonic()
        limits = httpx.Limits(max_connections=400, max_keepalive_connections=200)
        timeout = httpx.Timeout(30, read=150)  # SSE through nginx: heartbeat every 15 s
        # The schema first, as a deploy does (direct: a schema change needs a session).
        migrate = self._spawn(
            "migrate", {**self.env, "DATABASE_URL": self.direct_url}, MIGRATE_COMMAND
        )
        self.stopped.add(migrate.pid)  # its exit is expected
        if (code := await migrate.wait_async(60)) != 0:
            raise AssertionError(f"jobstream migrate exited {code}: {migrate.output()[-2000:]}")
        self.workers = [self._worker() for _ in range(3)]
        self.servers = [self._server(slot) for slot in range(2)]
        await asyncio.gather(*(self._ready(slot) for slot in range(2)))
        # nginx once the servers are ready: a server it found down it would leave alone for a
        # while (fail_timeout).
        self.nginx = Nginx(self.nginx_prefix, self.nginx_port, self.ports)
        self.client = httpx.AsyncClient(base_url=self.nginx.url, limits=limits, timeout=timeout)
        try:
            await self.nginx.ready()
            creating = asyncio.create_task(self._create_jobs())
            await asyncio.sleep(self.plan.warm_up_s)  # load before the deploy, by design
            self.phase.now = "servers-rolling"
            self.figures.open_at_roll = sum(not task.done() for _, task in self.followers)
            await self._roll_servers()
            self.phase.now = "workers-rolling"
            await self._roll_workers()
            if self.plan.restart_postgres and self.postgres is not None:
                self.phase.now = "postgres-restart"
                await self._restart_postgres()
            self.phase.now = "after"
            await creating
            await self._settle()
        finally:
            for _, task in self.followers:
                task.cancel()
            await asyncio.gather(*(t for _, t in self.followers), return_exceptions=True)
            await self.client.aclose()
            self.nginx.stop()
        self.figures.elapsed_s = time.monotonic() - started
        return self.figures

    async def _create_jobs(self) -> None:
        every = max(1, self.plan.jobs // max(1, self.plan.followers))
        tasks = []
        for i in range(self.plan.jobs):
            follow = i % every == 0 and i // every < self.plan.followers
            tasks.append(asyncio.create_task(self._create(i, follow)))
            await asyncio.sleep(self.plan.create_over_s / self.plan.jobs)
        await asyncio.gather(*tasks)

    async def _create(self, i: int, follow: bool) -> None:
        tokens = self.rng.randint(*self.plan.tokens)
        rate = self.plan.followed_tokens_per_second if follow else 40
        simulate = {"tokens": tokens, "pattern": "count", "tokens_per_second": rate,
                    "first_token_delay_s": 0}  # fmt: skip
        body: dict[str, Any] = {"prompt": f"fleet {i}", "max_tokens": tokens, "max_attempts": 10,
                                "simulate": simulate}  # fmt: skip
        expected = counted(tokens)
        if i % 3 == 2:  # a job of the test app's own: two calls, progress between
            body = {"job": "two_calls", "input": {"tokens": tokens}}
            expected = "".join(counted(part) for part in halves(tokens))
        key = f"fleet-{i}-{uuid.uuid4()}"
        deadline = time.monotonic() + self.plan.settle_timeout_s
        while True:
            try:
                response = await self.client.post(
                    "/api/jobs", json=body, headers={"Idempotency-Key": key}
                )
                if response.status_code in (200, 201, 202):
                    break
                self.phase.error(f"create {i}: {response.status_code} {response.text[:200]}")
                if response.status_code < 500 and response.status_code != 429:
                    self.figures.problems.append(f"create {i} refused: {response.status_code}")
                    return
            except httpx.TransportError as exc:
                self.phase.error(f"create {i}: {type(exc).__name__} {exc}")
            if time.monotonic() > deadline:
                self.figures.problems.append(f"create {i}: no answer within the settle time")
                return
            await asyncio.sleep(0.2)  # the same request again, with the same key
        job_id = response.json()["id"]
        self.created[job_id] = (key, expected)
        if follow:
            self.followers.append((job_id, asyncio.create_task(self._follow(job_id))))

    async def _follow(self, job_id: str) -> list[dict[str, Any]]:
        def retrying(delay_s: float, reason: str) -> None:
            # A 5xx or a 429 is an error a client sees; a stream ended early (a drain) or cut,
            # resumed with Last-Event-ID through nginx, is what a rolling deploy looks like.
            if reason.startswith(("server error", "429")) or "connect" in reason.lower():
                self.phase.error(f"follower {job_id}: {reason}")
            else:
                self.phase.reconnect(reason)

        follower = Follower(self.client, job_id, backoff_max_s=0.5, on_retry=retrying)
        return [event async for event in follower.events()]

    # -- the checks -----------------------------------------------------------------------

    async def _settle(self) -> None:
        pool = await db.create_pool(self.direct_url, min_size=1, max_size=4)
        try:
            await self._until_terminal(pool)
            try:
                async with asyncio.timeout(self.plan.settle_timeout_s):
                    await asyncio.gather(*(t for _, t in self.followers), return_exceptions=True)
            except TimeoutError:
                self.figures.problems.append("followers still reading after the settle time")
            await self._check(pool)
        finally:
            await pool.close()

    async def _until_terminal(self, pool: asyncpg.Pool) -> None:
        ids = [uuid.UUID(job_id) for job_id in self.created]
        deadline = time.monotonic() + self.plan.settle_timeout_s
        while time.monotonic() < deadline:
            open_jobs = await pool.fetchval(
                "SELECT count(*) FROM jobs WHERE id = ANY($1) AND status <> ALL($2)",
                ids, list(TERMINAL_STATUSES),
            )  # fmt: skip
            if open_jobs == 0:
                return
            await asyncio.sleep(0.2)

    async def _check(self, pool: asyncpg.Pool) -> None:
        figures, problems = self.figures, self.figures.problems
        figures.jobs = len(self.created)
        figures.lost = self.plan.jobs - len(self.created)  # creates that never got a 2xx
        total = await pool.fetchval("SELECT count(*) FROM jobs")
        if total > len(self.created):
            figures.doubled += total - len(self.created)
            problems.append(f"{total} jobs stored for {len(self.created)} idempotency keys")
        rows = {
            str(r["id"]): r
            for r in await pool.fetch(
                "SELECT j.id, j.status, j.result, j.last_seq,"
                " (SELECT count(*) FROM job_attempts a WHERE a.job_id = j.id"
                "  AND a.outcome = 'succeeded') AS accepted"
                " FROM jobs j WHERE j.id = ANY($1)",
                [uuid.UUID(job_id) for job_id in self.created],
            )
        }
        for job_id, (_key, expected) in self.created.items():
            row = rows.get(job_id)
            if row is None or row["status"] not in TERMINAL_STATUSES:
                figures.lost += 1
                problems.append(f"job {job_id} is {row and row['status']}")
                continue
            figures.statuses[row["status"]] = figures.statuses.get(row["status"], 0) + 1
            if row["accepted"] != (1 if row["status"] == "succeeded" else 0):
                figures.doubled += row["accepted"] > 1
                problems.append(f"job {job_id} ({row['status']}): {row['accepted']} accepted")
            if row["status"] != "succeeded":
                problems.append(f"job {job_id} ended {row['status']}")
            elif row["result"]["text"] != expected:
                problems.append(f"job {job_id}: the result is not its text")
        figures.followers = len(self.followers)
        for job_id, task in self.followers:
            row = rows.get(job_id)
            if not task.done() or task.cancelled() or task.exception() is not None:
                problems.append(f"follower of {job_id} did not end: {task}")
                continue
            seen = task.result()
            text = chaos_check.client_text(seen)
            gap = chaos_check.tiling_problem(seen, row["last_seq"]) if row else "no job"
            if row and row["result"] and text == row["result"]["text"] and gap is None:
                figures.followers_exact += 1
            else:
                problems.append(f"follower of {job_id}: not the result text ({gap})")
        for phase, count in figures.errors.items():
            if phase != DATABASE_DOWN and count:
                problems.append(f"{count} client errors during {phase}")
        problems += [
            f"{p.name} exited on its own with {p.returncode}: {p.output()[-1500:]}"
            for p in self.everyone
            if p.returncode is not None and p.pid not in self.stopped
        ]
        problems += self._errors_logged()
        if "[emerg]" in (log := self.nginx.error_log()) or "[crit]" in log:
            problems.append(f"nginx: {log[-1500:]}")

    def _errors_logged(self) -> list[str]:
        """Every error a process logged, as a problem, except those while PostgreSQL restarted:
        a statement that met the restart may be logged as an error (the run goes on), and is
        counted by event instead."""
        problems = []
        for process in self.everyone:
            for line in process.log_events():
                if line.get("level") not in ("error", "critical"):
                    continue
                at = datetime.fromisoformat(str(line.get("timestamp", "")).replace("Z", "+00:00"))
                window = self.restart_window
                if window is not None and window[0] <= at <= window[1]:
                    self.figures.logged_in_restart[str(line.get("event"))] += 1
                    continue
                cause = str(line.get("exception", "")).strip().splitlines()[-1:]
                problems.append(f"{process.name} logged {line.get('event')!r} {cause}")
            tracebacks = [x for x in process.output().splitlines() if x.startswith("Traceback")]
            if tracebacks:
                problems.append(f"{process.name} printed {len(tracebacks)} traceback(s)")
        return problems
