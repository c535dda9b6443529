"""`python -m server` under connections that never ask for anything (issue 9, defect 7).

Before: with a 1,024 open-file limit, 1,100 silent TCP connections locked every client out (the
server held them for ever, and a new connection was accepted and dropped at once), nothing
capped connections, and asyncio logged a traceback per failed accept, 90 MB in 25 s.
"""

from __future__ import annotations

import asyncio
import resource
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from pathlib import Path

import asyncpg
import httpx
import pytest

from jobstream import tenants
from jobstream.ports import free_port
from jobstream.server import connections, stream_slots
from tests.support.http_server import http_client
from tests.support.polling import eventually
from tests.support.processes import ManagedProcess, Processes

ACCEPT_ERROR = "socket.accept() out of system resource"
RETRY_FAILED = "Exception in callback BaseSelectorEventLoop._start_serving"
OVER_LIMIT = "Exceeded concurrency limit."

Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def status_of(url: str) -> int | None:
    """GET on a connection of its own; None when the server drops it."""
    try:
        async with http_client(timeout=5) as client:
            return (await client.get(url)).status_code
    except httpx.TransportError:
        return None


async def start(group: Processes, module: str, env: dict[str, str], url: str) -> ManagedProcess:
    process = group.spawn(module, {"JOBSTREAM_LOG_JSON": "true", **env}, name="server")

    async def answer() -> int | None:
        if process.returncode is not None:
            raise AssertionError(f"exited {process.returncode}:\n{process.output()}")
        return await status_of(url)

    await eventually(answer, lambda code: code == 200, what="it serves", timeout_s=30)
    return process


def server_env(database_url: str, port: int, **settings: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "JOBSTREAM_PORT": str(port),
        **{f"JOBSTREAM_{name.upper()}": value for name, value in settings.items()},
    }


@asynccontextmanager
async def held(port: int, count: int) -> AsyncIterator[list[Connection]]:
    """`count` connections that send nothing, closed on the way out."""
    opened: list[Connection] = []
    try:
        for _ in range(count):
            opened.append(await asyncio.open_connection("127.0.0.1", port))
        yield opened
    finally:
        for _, writer in opened:
            writer.close()


def open_files_of(pid: int) -> tuple[int, int]:
    """The soft and hard open-file limits of a running process, from /proc."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError(f"no open-file limit in /proc/{pid}/limits")


def lines_starting(process: ManagedProcess, text: str) -> int:
    return sum(str(e.get("event", "")).startswith(text) for e in process.log_events())


async def test_silent_connections_past_the_default_open_file_limit_do_not_lock_clients_out(
    database_url: str, process_group: Processes
) -> None:
    few, silent = 256, 400  # as 1,024 and 1,100, scaled down
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 4 * silent:
        pytest.skip(f"the hard open-file limit ({hard}) leaves no room to raise to")
    port = free_port()
    url = f"http://127.0.0.1:{port}/healthz"
    env = {**server_env(database_url, port), "FEW_FILES": str(few), "FEW_FILES_RUN": "server"}
    server = await start(process_group, "tests.support.few_files", env, url)
    # Started at a soft 256, it raised itself to the hard limit, and sized its cap from that.
    assert open_files_of(server.pid) == (hard, hard)
    limits = await server.wait_for_log("connection_limits")
    assert limits["open_files"] == hard
    assert limits["max_connections"] == connections.connection_limit(None, hard)
    async with held(port, silent):
        status = await eventually(
            lambda: status_of(url), lambda code: code == 200, what="a client is served"
        )
    assert status == 200


async def test_a_connection_that_never_sends_a_request_head_is_closed(
    database_url: str, process_group: Processes
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/healthz"
    await start(process_group, "server", server_env(database_url, port, head_timeout_s="0.5"), url)
    async with held(port, 1) as ((reader, _),):
        # Closed, or reset: either way at an end, and within ten times the deadline.
        async with asyncio.timeout(5):
            with suppress(ConnectionResetError):
                assert await reader.read() == b""


async def test_a_request_past_max_connections_is_answered_503_and_logged_once(
    database_url: str, process_group: Processes
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/healthz"
    env = server_env(database_url, port, max_connections="3", head_timeout_s="60")
    server = await start(process_group, "server", env, url)
    async with held(port, 3) as three:
        # The server counts a connection once it accepts it: a bounded poll, not a guess.
        await eventually(lambda: status_of(url), lambda code: code == 503, what="503")
        for _ in range(20):
            assert await status_of(url) == 503
        _, writer = three.pop()
        writer.close()
        await eventually(lambda: status_of(url), lambda code: code == 200, what="room again")
    # uvicorn warns once per request it turns away, here 21 or more: an attacker's rate. One line
    # per 10 s passes (two, should this test have taken longer than that).
    assert 1 <= lines_starting(server, OVER_LIMIT) <= 2


async def test_the_accept_error_storm_of_asyncios_loop_is_logged_once_per_interval(
    process_group: Processes,
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    env = {"FEW_FILES": "64", "FEW_FILES_RUN": "asyncio-http", "JOBSTREAM_PORT": str(port)}
    server = await start(process_group, "tests.support.few_files", env, url)
    async with held(port, 100):

        async def accept_errors() -> int:
            return lines_starting(server, ACCEPT_ERROR)

        await eventually(accept_errors, lambda n: n >= 1, what="the descriptors run out")
        # While it lasts, asyncio retries the accept at once and fails again: thousands of
        # tracebacks a second. Watch a second of it.
        loop = asyncio.get_running_loop()
        watch_until = loop.time() + 1.0
        while loop.time() < watch_until:
            assert await accept_errors() == 1, f"{await accept_errors()} accept errors logged"
            await asyncio.sleep(0.05)
    server.terminate()
    await server.wait_async(15)  # uvicorn re-raises SIGTERM once it has stopped: no exit code
    # The accept retries that piled up fail once more each as the socket closes: one line too.
    assert lines_starting(server, RETRY_FAILED) <= 1
    assert len(server.output()) < 100_000


async def test_one_tenants_streams_cannot_take_every_connection(
    database_url: str, pool: asyncpg.Pool, process_group: Processes
) -> None:
    # The probe's shape: 40 streams of tenant A, opened with one job's events token and no key,
    # on a server capped at 40 connections with the default per-tenant cap. Before, all 40 were
    # served and tenant B got 503 for as long as they stayed open.
    key_a, key_b = await tenants.create(pool, "tenant-a"), await tenants.create(pool, "tenant-b")
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    env = server_env(database_url, port, max_connections="40")
    server = await start(process_group, "server", env, f"{base_url}/healthz")
    cap = (await server.wait_for_log("app_started"))["tenant_max_streams"]
    assert cap == stream_slots.tenant_limit(None, 40) == 10
    sse = {"Accept": "text/event-stream"}
    as_a, as_b = {"Authorization": f"Bearer {key_a}"}, {"Authorization": f"Bearer {key_b}"}
    async with http_client(base_url, timeout=10) as creator:
        # Queued, with no worker running: a stream of A's job stays open.
        job_a = (await creator.post("/api/jobs", json={"prompt": "a"}, headers=as_a)).json()
        job_b = (await creator.post("/api/jobs", json={"prompt": "b"}, headers=as_b)).json()
    async with http_client(base_url, timeout=10) as keyless, AsyncExitStack() as streams:
        statuses = []
        for _ in range(40):
            # Each on a connection of its own: every response is held, the refused ones too.
            response = await streams.enter_async_context(
                keyless.stream("GET", job_a["events_url"], headers=sse)
            )
            statuses.append(response.status_code)

        async def b_stream() -> int | None:
            """B's stream, on a connection of its own (as a new client's would be)."""
            try:
                async with (
                    http_client(base_url, timeout=10, headers=as_b) as b,
                    b.stream("GET", f"/api/jobs/{job_b['id']}/events", headers=sse) as got,
                ):
                    return got.status_code
            except httpx.TransportError:
                return None

        # Within less than the keep-alive (5 s): the refused streams' connections were closed
        # with their answers, not left open until it ran out.
        await eventually(b_stream, lambda status: status == 200, what="B is served", timeout_s=4)
        assert statuses == [200] * cap + [429] * (40 - cap)
