"""The processes and the readers a chaos run (tests/support/chaos.py) works on: a fleet of
worker and server processes that knows which exits it caused, and followers that reconnect."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import httpx

from jobstream.follower import Follower, FollowError
from jobstream.ports import free_port
from tests.support.chaos_plan import Plan
from tests.support.http_server import http_client
from tests.support.processes import ManagedProcess, Processes


class Fleet:
    """The worker and server processes; it knows which exits it caused."""

    def __init__(self, group: Processes, database_url: str, plan: Plan) -> None:
        self._group = group
        self._plan = plan
        self._spawned = 0
        self.env = {
            "DATABASE_URL": database_url,
            # One key for every server, so that any of them accepts any events_url token.
            "JOBSTREAM_SECRET_KEY": "chaos",
            "JOBSTREAM_LOG_JSON": "true",
            "JOBSTREAM_LEASE_S": "2",
            "JOBSTREAM_POLL_INTERVAL_S": "0.1",
            "JOBSTREAM_BACKOFF_BASE_S": "0",
            "JOBSTREAM_BACKOFF_MAX_S": "0",
            "JOBSTREAM_HUB_RECHECK_S": "1",
            "JOBSTREAM_HUB_PROBE_S": "1",
            "JOBSTREAM_SHUTDOWN_GRACE_S": "0",
            # A process started while PostgreSQL is down waits for it, never gives up.
            "JOBSTREAM_DB_CONNECT_TIMEOUT_S": "120",
            # Every third job is one of the test app's own (tests/support/chaos.py).
            "JOBSTREAM_APP": "tests.support.user_jobs:app",
            # The janitor looks for logs to compact every second, not every five.
            "JOBSTREAM_JANITOR_INTERVAL_S": "1",
        }
        if plan.compact_after_s is not None:
            self.env["JOBSTREAM_COMPACT_AFTER_S"] = str(plan.compact_after_s)
        self.ports = [free_port() for _ in range(plan.servers)]
        self.urls = [f"http://127.0.0.1:{port}" for port in self.ports]
        self.workers: list[ManagedProcess] = []
        self.servers: list[ManagedProcess] = []
        self.killed: set[int] = set()  # pids we killed
        self.everyone: list[ManagedProcess] = []

    def _spawn(self, module: str, env: dict[str, str]) -> ManagedProcess:
        self._spawned += 1
        process = self._group.spawn(module, env, name=f"{module}-{self._spawned}")
        self.everyone.append(process)
        return process

    def spawn_worker(self) -> ManagedProcess:
        worker = self._spawn("worker", {**self.env, "JOBSTREAM_WORKER_ID": f"w{self._spawned + 1}"})
        self.workers.append(worker)
        return worker

    def spawn_server(self, slot: int) -> ManagedProcess:
        server = self._spawn("server", {**self.env, "JOBSTREAM_PORT": str(self.ports[slot])})
        if slot < len(self.servers):
            self.servers[slot] = server
        else:
            self.servers.append(server)
        return server

    async def start(self) -> None:
        for _ in range(self._plan.workers):
            self.spawn_worker()
        for slot in range(self._plan.servers):
            self.spawn_server(slot)
        await asyncio.gather(*(self.wait_up(slot) for slot in range(self._plan.servers)))

    async def wait_up(self, slot: int, timeout_s: float = 60) -> None:
        server = self.servers[slot]
        deadline = time.monotonic() + timeout_s
        async with http_client(base_url=self.urls[slot], timeout=2) as client:
            while True:
                if server.returncode is not None:
                    raise AssertionError(f"{server.name} exited ({server.returncode})")
                try:
                    if (await client.get("/healthz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError(f"{server.name} did not answer within {timeout_s} s")
                await asyncio.sleep(0.05)

    async def kill(self, process: ManagedProcess) -> None:
        self.killed.add(process.pid)
        process.kill()
        await process.wait_async(10)

    async def kill_a_worker(self, rng: random.Random) -> None:
        victim = rng.choice(self.workers)
        self.workers.remove(victim)
        await self.kill(victim)
        self.spawn_worker()

    async def restart_server(self, slot: int) -> None:
        await self.kill(self.servers[slot])
        self.spawn_server(slot)
        await self.wait_up(slot)

    def errors_logged(self) -> list[str]:
        """An attempt that crashed is a defect even when a retry then covers it (the job still
        succeeds, and nothing else would tell)."""
        return [error for process in self.everyone for error in process.errors_logged()]

    def unexpected_exits(self) -> list[str]:
        return [
            f"{p.name} exited on its own with {p.returncode}: {p.output()[-1500:]}"
            for p in self.everyone
            if p.returncode is not None and p.pid not in self.killed
        ]


class Reader:
    """One follower of a job: resumes from its cursor after any failure; a choppy one also hangs
    up now and then on purpose, as a phone on a train does. Sent `resync` (its cursor inside a
    range the janitor compacted), it reads the snapshot and goes on from its `last_seq`, as the
    page and `jobstream follow` do; the snapshot is kept in the event (`snapshot`)."""

    def __init__(
        self, client: httpx.AsyncClient, job_id: str, *, choppy: bool, rng: random.Random
    ) -> None:
        self.job_id = job_id
        self.seen: list[dict[str, Any]] = []
        self.reconnects = 0
        self.hangups = 0
        self.resyncs = 0
        self.error: str | None = None  # why it stopped before the end, if it did
        self._client = client
        self._choppy = choppy
        self._rng = rng
        self._follower = Follower(
            client, job_id, backoff_max_s=0.5, on_retry=self._retrying, rng=random.Random()
        )
        self.task = asyncio.create_task(self._run(), name=f"reader-{job_id}")

    def _retrying(self, delay_s: float, reason: str) -> None:
        self.reconnects += 1

    async def _run(self) -> None:
        try:
            async for event in self._follower.events():
                if event["type"] == "resync":
                    self.resyncs += 1
                    snapshot = await self._snapshot()
                    self.seen.append({**event, "snapshot": snapshot})
                    self._follower.resume_from(snapshot["last_seq"])
                    continue
                self.seen.append(event)
                if self._choppy and event["type"] != "done" and self._rng.random() < 0.1:
                    self.hangups += 1
                    self._follower.resume_from(self._follower.cursor)
        except FollowError as exc:  # a 4xx: the server refused this reader for good
            self.error = str(exc)

    async def _snapshot(self) -> dict[str, Any]:
        """The job as GET /api/jobs/{id} shows it, asked until a server answers."""
        while True:
            try:
                response = await self._client.get(f"/api/jobs/{self.job_id}")
                if response.status_code < 500:
                    if response.status_code != 200:
                        raise FollowError(response.status_code, response.text[:200])
                    snapshot: dict[str, Any] = response.json()
                    return snapshot
            except httpx.TransportError:
                pass
            self.reconnects += 1
            await asyncio.sleep(0.2)
