"""Browser fixtures: one Chromium per session, a new context per test, and per test a real
server and worker (`python -m server`, `python -m worker`) on a fresh PostgreSQL database.

Chromium is Debian's (`make browser` installs it); Playwright drives it and downloads nothing.
Every test's process logs land in `test-output/e2e/<test>/` for a post-mortem.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, async_playwright
from prometheus_client.parser import text_string_to_metric_families

from jobstream import db
from jobstream.embedded_pg import EmbeddedPostgres
from jobstream.ports import free_port
from jobstream.sql import queries
from tests.support.http_server import http_client
from tests.support.polling import eventually
from tests.support.processes import REPO_ROOT, ManagedProcess, Processes, processes

CHROMIUM = Path("/usr/bin/chromium")
# The machine's network is closed: without these, Chromium's own background connections
# (updates, sync, QUIC probes) fail noisily and slow start-up.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
OUTPUT_DIR = REPO_ROOT / "test-output"
# A start on an idle machine takes about a second; beside two other suites on two cores, 30 s
# was seen to pass. Only a server that never comes up waits it out.
SERVER_START_TIMEOUT_S = 60.0
_OPEN = "jobstream_open_streams"


class Stack:
    """A server and a worker as real processes; the server can be killed and started again."""

    def __init__(self, group: Processes, database_url: str) -> None:
        self._group = group
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.env = {
            "DATABASE_URL": database_url,
            "JOBSTREAM_HOST": "127.0.0.1",
            "JOBSTREAM_PORT": str(self.port),
            # One key for every server process: a restarted server accepts the events_url
            # tokens its predecessor signed, as a fleet behind a load balancer would.
            "JOBSTREAM_SECRET_KEY": "e2e-test-secret",
            "JOBSTREAM_BACKOFF_BASE_S": "0",
            "JOBSTREAM_BACKOFF_MAX_S": "0",
            "JOBSTREAM_POLL_INTERVAL_S": "0.2",
            "JOBSTREAM_HUB_RECHECK_S": "1",
            "JOBSTREAM_SHUTDOWN_GRACE_S": "1",
            "JOBSTREAM_LOG_JSON": "true",
        }
        self.http = http_client(self.base_url, timeout=10)
        self.server: ManagedProcess | None = None
        self.worker: ManagedProcess | None = None
        self._servers_started = 0

    async def start(self) -> None:
        self.worker = self._group.spawn("worker", self.env, name="worker")
        await self.start_server()

    async def start_server(self) -> None:
        self._servers_started += 1
        server = self._group.spawn("server", self.env, name=f"server-{self._servers_started}")
        self.server = server

        async def healthz() -> int | None:
            if server.returncode is not None:
                raise AssertionError(f"server exited ({server.returncode}):\n{server.output()}")
            try:
                return (await self.http.get("/healthz")).status_code
            except httpx.TransportError:
                return None

        await eventually(
            healthz,
            lambda code: code == 200,
            what="the server answers /healthz",
            timeout_s=SERVER_START_TIMEOUT_S,
            interval_s=0.05,
        )

    async def kill_worker(self) -> None:
        """SIGKILL, as in a crash: its attempts' leases run out, and another worker reaps them."""
        assert self.worker is not None
        self.worker.kill()
        await self.worker.wait_async(10)

    def start_worker(self, name: str) -> None:
        self.worker = self._group.spawn("worker", self.env, name=name)

    async def kill_server(self) -> None:
        """SIGKILL, as in a crash: open streams are cut with no goodbye."""
        assert self.server is not None
        self.server.kill()
        await self.server.wait_async(10)

    async def create_job(self, body: dict[str, Any]) -> dict[str, Any]:
        response = await self.http.post("/api/jobs", json=body)
        assert response.status_code == 202, response.text
        job: dict[str, Any] = response.json()
        return job

    async def streams_open(self, count: int) -> None:
        """Wait until the server serves `count` SSE responses (its jobstream_open_streams):
        how a test knows a reader in another process is following before a job starts."""

        async def gauge() -> float:
            text = (await self.http.get("/metrics")).text
            family = next(f for f in text_string_to_metric_families(text) if f.name == _OPEN)
            return family.samples[0].value

        await eventually(
            gauge, lambda value: value >= count, what=f"{count} streams are open", timeout_s=30
        )

    @contextlib.asynccontextmanager
    async def provider_held(self, provider: str) -> AsyncIterator[None]:
        """No job of `provider` starts inside the block (its provider_state row is paused, as a
        429 pauses it); at the end it is released and the worker woken, as a create wakes it."""
        conn = await db.connect(self.env["DATABASE_URL"])
        try:
            await conn.execute(
                "INSERT INTO provider_state (provider, paused_until) VALUES ($1, 'infinity')"
                " ON CONFLICT (provider) DO UPDATE SET paused_until = 'infinity'",
                provider,
            )
            yield
            await conn.execute(
                "UPDATE provider_state SET paused_until = NULL WHERE provider = $1", provider
            )
            await conn.execute(queries.NOTIFY_RUNNABLE, [provider])
        finally:
            await conn.close()

    async def aclose(self) -> None:
        await self.http.aclose()


def _test_dir(request: pytest.FixtureRequest) -> Path:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    path = OUTPUT_DIR / "e2e" / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


@pytest.fixture
def output_dir(request: pytest.FixtureRequest) -> Path:
    return _test_dir(request)


@pytest.fixture
def embedded_postgres(postgres: tuple[str, EmbeddedPostgres | None]) -> EmbeddedPostgres:
    """The suite's own PostgreSQL, for tests that stop and start it; skips the test when
    DATABASE_URL points at a server this suite does not control."""
    server = postgres[1]
    if server is None:
        pytest.skip("DATABASE_URL points at a server this suite does not control")
    return server


@pytest.fixture
def process_group(output_dir: Path) -> Iterator[Processes]:
    with processes(output_dir) as group:
        yield group


@pytest.fixture
async def stack(process_group: Processes, database_url: str) -> AsyncIterator[Stack]:
    async with running_stack(process_group, database_url) as started:
        yield started


@contextlib.asynccontextmanager
async def running_stack(
    group: Processes, database_url: str, *, app: str | None = None
) -> AsyncIterator[Stack]:
    """A started Stack, closed after; `app` is its JOBSTREAM_APP (a module's `stack` fixture
    that runs jobs of its own, which the `page` fixture then opens)."""
    stack = Stack(group, database_url)
    if app is not None:
        stack.env["JOBSTREAM_APP"] = app
    try:
        await stack.start()
        yield stack
    finally:
        await stack.aclose()


@pytest.fixture(scope="session")
def chromium() -> Path:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make browser` installs Debian's chromium")
    return CHROMIUM


@pytest.fixture(scope="session")
async def browser(chromium: Path) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        # launch() gives the browser a fresh temporary profile (user-data dir) of its own.
        browser = await playwright.chromium.launch(
            executable_path=str(chromium), args=CHROMIUM_ARGS, headless=True
        )
        yield browser
        await browser.close()


@pytest.fixture
async def page(browser: Browser, stack: Stack) -> AsyncIterator[Page]:
    context = await browser.new_context(
        base_url=stack.base_url, viewport={"width": 1280, "height": 900}
    )
    context.set_default_timeout(20_000)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield page
    finally:
        await context.close()
    assert not errors, f"uncaught errors in the page: {errors}"
