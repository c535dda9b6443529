"""Streams across real process crashes: a worker killed with -9, a server killed and restarted,
a server stopped with streams open, and a reader moved between two servers (docs/design.md)."""

from __future__ import annotations

import asyncio
import random
import signal
import socket
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from jobstream import events
from jobstream.follower import Follower
from jobstream.server.app import create_app
from jobstream.settings import Settings
from tests.e2e.conftest import Stack
from tests.support import attempt_driver as drive
from tests.support.http_server import http_client, serve
from tests.support.polling import eventually
from tests.support.processes import ManagedProcess, Processes
from tests.support.sse_client import read_stream, reassemble

JOBSTREAM_CLI = str(Path(sys.executable).with_name("jobstream"))


def counted(tokens: int) -> str:
    return "".join(f"{i} " for i in range(tokens))


def count_job(tokens: int, tokens_per_second: float, **more: Any) -> dict[str, Any]:
    simulate = {
        "tokens": tokens,
        "pattern": "count",
        "tokens_per_second": tokens_per_second,
        "first_token_delay_s": 0,
    }
    return {"prompt": "count", "max_tokens": tokens, "simulate": simulate, **more}


class Reader:
    """A resuming reader (jobstream.follower, as the CLI uses it) that records what it saw."""

    def __init__(self, client: httpx.AsyncClient, job_id: str) -> None:
        self.seen: list[dict[str, Any]] = []
        self.reconnects = 0
        self.tokens = asyncio.Event()  # set at the first token
        follower = Follower(client, job_id, on_retry=self._retrying, backoff_max_s=0.5)
        self.task = asyncio.create_task(self._run(follower))

    def _retrying(self, delay_s: float, reason: str) -> None:
        self.reconnects += 1

    async def _run(self, follower: Follower) -> None:
        async for event in follower.events():
            self.seen.append(event)
            if event["type"] == "token":
                self.tokens.set()

    async def result(self) -> list[dict[str, Any]]:
        await asyncio.wait_for(self.task, 30)
        return self.seen


async def full_log(pool: asyncpg.Pool, job_id: str) -> list[dict[str, Any]]:
    return [e.to_json() for e in await events.read_after(pool, uuid.UUID(job_id), 0)]


def worker_env(database_url: str, name: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "JOBSTREAM_WORKER_ID": name,
        "JOBSTREAM_POLL_INTERVAL_S": "0.1",
        "JOBSTREAM_LEASE_S": "1",
        "JOBSTREAM_BACKOFF_BASE_S": "0",
        "JOBSTREAM_BACKOFF_MAX_S": "0",
    }


async def test_readers_see_a_reset_and_the_right_text_after_kill_9_of_the_worker(
    process_group: Processes, database_url: str, settings: Settings, pool: asyncpg.Pool
) -> None:
    # Attempt 1 hangs after 20 tokens, as a provider that stopped answering, until the kill:
    # a worker that ran it to the end before the readers saw a token left no attempt 2.
    hang = {"attempt": 1, "after_tokens": 20, "kind": "timeout"}
    body = count_job(120, 60, timeout_s=60)
    body["simulate"]["faults"] = [hang]
    async with serve(create_app(settings)) as url, http_client(base_url=url) as client:
        job = (await client.post("/api/jobs", json=body)).json()
        readers = [Reader(client, job["id"]) for _ in range(3)]
        first = process_group.spawn("worker", worker_env(database_url, "first"), name="first")
        await asyncio.wait_for(readers[0].tokens.wait(), 15)
        first.kill()
        assert await first.wait_async(10) == -9
        late = Reader(client, job["id"])  # joins between the two attempts
        process_group.spawn("worker", worker_env(database_url, "second"), name="second")
        results = [await r.result() for r in (*readers, late)]
    log = await full_log(pool, job["id"])
    assert log[-1]["type"] == "done" and log[-1]["status"] == "succeeded"
    assert log[-1]["result"]["text"] == counted(120)
    for seen in results:
        assert seen == log  # every event once, in order, the same as the table
        assert [(e["attempt"], e["type"]) for e in seen if e["type"] == "reset"] == [
            (1, "reset"),
            (2, "reset"),
        ]
        assert reassemble(seen) == counted(120)


async def test_readers_resume_from_their_cursor_when_the_server_is_killed(
    stack: Stack, pool: asyncpg.Pool
) -> None:
    async with http_client(base_url=stack.base_url, timeout=10) as client:
        # Every reader, the CLI too, follows before the job starts: all are cut mid-stream.
        async with stack.provider_held("simulated"):
            job = await stack.create_job(count_job(150, 50))
            readers = [Reader(client, job["id"]) for _ in range(3)]
            cli = await asyncio.create_subprocess_exec(
                JOBSTREAM_CLI, "follow", job["id"], "--url", stack.base_url,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            await stack.streams_open(4)
        await asyncio.wait_for(readers[0].tokens.wait(), 15)
        await stack.kill_server()
        await stack.start_server()
        results = [await r.result() for r in readers]
        out, err = await asyncio.wait_for(cli.communicate(), 30)
    log = await full_log(pool, job["id"])
    assert log[-1]["result"]["text"] == counted(150)
    for reader, seen in zip(readers, results, strict=True):
        assert reader.reconnects >= 1
        assert seen == log
    assert cli.returncode == 0, err.decode()
    assert out.decode() == counted(150) + "\n"  # piped: the final text, once
    assert b"connection lost" in err


def first_token(seen: asyncio.Event) -> Callable[[dict[str, Any]], None]:
    def on_event(event: dict[str, Any]) -> None:
        if event["type"] == "token":
            seen.set()

    return on_event


async def test_sigterm_ends_open_streams_and_the_server_exits_promptly(
    stack: Stack, pool: asyncpg.Pool
) -> None:
    job = await stack.create_job(count_job(400, 20))  # far longer than this test
    assert stack.server is not None
    # No idle keep-alive connection of ours: the drain would leave it for its keep-alive time
    # (the next test), and this one is about the streams.
    await stack.http.aclose()
    async with http_client(base_url=stack.base_url, timeout=10) as client:
        tokens = [asyncio.Event() for _ in range(5)]
        streams = [
            asyncio.create_task(read_stream(client, job["events_url"], on_event=first_token(seen)))
            for seen in tokens
        ]
        await asyncio.wait_for(asyncio.gather(*(seen.wait() for seen in tokens)), 15)
        stack.server.terminate()
        # Well within uvicorn's 5 s graceful timeout, which streams left open would run out,
        # and within the 5 s keep-alive the drain leaves an idle connection: each stream ended
        # must close its connection too. The bound leaves a busy machine room. uvicorn
        # re-raises the signal it caught once it has shut down, hence -SIGTERM.
        assert await stack.server.wait_async(4) == -signal.SIGTERM
        received = await asyncio.gather(*streams)
    assert "graceful shutdown exceeded" not in stack.server.output()
    assert all(got.ended for got in received)  # ended cleanly: EventSource reconnects
    assert all(got.events and got.events[-1]["type"] != "done" for got in received)


async def test_a_stopping_server_serves_a_request_on_an_idle_connection_and_then_closes_it(
    stack: Stack,
) -> None:
    """What a proxy's cached upstream connection meets in a rolling deploy: a request sent on
    it just after SIGTERM is answered (with Connection: close), not reset; a new connection is
    refused, which a proxy may retry elsewhere even for a POST."""
    assert stack.server is not None
    await stack.http.aclose()  # its connection would hold the drain open too
    # One connection, idle in the pool after this request.
    async with http_client(base_url=stack.base_url, timeout=10) as client:
        assert (await client.get("/healthz")).status_code == 200
        stack.server.terminate()

        async def refuses_new_connections() -> bool:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", stack.port)
            except OSError:
                return True
            writer.close()
            return False

        await eventually(refuses_new_connections, bool, what="the listener is closed")
        assert stack.server.returncode is None  # our idle connection holds the drain open
        job = await client.post("/api/jobs", json={"prompt": "p"})
        assert job.status_code == 202, job.text
        assert job.headers["connection"] == "close"
        # Its last response sent, nothing holds the server.
        assert await stack.server.wait_async(4) == -signal.SIGTERM
    assert "graceful shutdown exceeded" not in stack.server.output()


async def test_a_reader_moved_between_two_servers_resumes_exactly(
    process_group: Processes, database_url: str, pool: asyncpg.Pool
) -> None:
    servers = [await start_server(process_group, database_url, f"server-{n}") for n in "ab"]
    rng = random.Random()
    clients = [http_client(base_url=url, timeout=10) for url in servers]
    try:
        job = (await clients[0].post("/api/jobs", json={"prompt": "p"})).json()
        producer = asyncio.create_task(produce(pool, 200))
        seen: list[dict[str, Any]] = []
        cursor, hops = "0", 0
        while True:
            # Each hop reads a few events from one server, hangs up and goes to the other.
            client = clients[hops % 2]
            got = await read_stream(
                client, job["events_url"], last_event_id=cursor, max_events=rng.randint(1, 25)
            )
            seen += got.events
            cursor = got.last_id or cursor
            hops += 1
            if got.ended or got.status == 204:  # 204: hung up right after `done`
                break
        await producer
    finally:
        for client in clients:
            await client.aclose()
    assert hops > 4
    assert seen == await full_log(pool, job["id"])
    assert reassemble(seen) == counted(200)


async def produce(pool: asyncpg.Pool, tokens: int) -> None:
    held = await drive.claim(pool)
    for i in range(0, tokens, 2):
        await drive.tokens(pool, held, drive.count_tokens(i, i + 2))
    await drive.succeed(pool, held, counted(tokens))


async def start_server(group: Processes, database_url: str, name: str) -> str:
    """`python -m server` on a free port; its base URL once it answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        "DATABASE_URL": database_url,
        "JOBSTREAM_PORT": str(port),
        "JOBSTREAM_SECRET_KEY": "shared-by-the-fleet",  # tokens valid on either server
    }
    server: ManagedProcess = group.spawn("server", env, name=name)
    await server.wait_for_log("server_ready", timeout_s=30)
    url = f"http://127.0.0.1:{port}"
    async with http_client() as client:
        # At once: server_ready is logged after the bind (server/shutdown.py).
        assert (await client.get(url + "/healthz")).status_code == 200
    return url
