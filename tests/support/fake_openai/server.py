"""The fake on a real loopback port: uvicorn in a thread of its own, so it answers even while a
test blocks; and reading the counters of one in another process."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import AsyncIterator, Callable
from types import TracebackType

import httpx
import uvicorn

from tests.support.fake_openai.app import create_app
from tests.support.fake_openai.recording import Recorder, Stats
from tests.support.fake_openai.replies import Reply
from tests.support.polling import eventually


class _Server(uvicorn.Server):
    """uvicorn that says when it accepts connections, so start() waits on a signal."""

    def __init__(self, config: uvicorn.Config, ready: threading.Event) -> None:
        super().__init__(config)
        self._ready = ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self._ready.set()


class FakeOpenAI:
    """The fake server. Start with `async with` (or `start()`/`stop()` from sync code)."""

    def __init__(
        self, *, api_key: str | None = None, default: Reply | None = None, port: int = 0
    ) -> None:
        self._recorder = Recorder(default or Reply())
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", port))
        self.port: int = self._socket.getsockname()[1]
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._error: BaseException | None = None
        config = uvicorn.Config(
            create_app(self._recorder, api_key, self._stopping_event),
            http="h11",
            ws="none",
            lifespan="off",
            # Leave the test process's logging alone: no dictConfig, no level changes.
            log_config=None,
            log_level=None,
            access_log=False,
            timeout_graceful_shutdown=5,
        )
        self._server = _Server(config, self._ready)
        self._thread = threading.Thread(
            target=self._run, name=f"fake-openai:{self.port}", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What `openai_base_url` should be set to."""
        return f"{self.url}/v1"

    def push(self, *replies: Reply) -> None:
        """Queue replies for the next requests, in order (before any prompt marker)."""
        self._recorder.push(replies)

    def reset(self) -> None:
        self._recorder.reset()

    def stats(self) -> Stats:
        return self._recorder.snapshot()

    async def wait_until(
        self, predicate: Callable[[Stats], bool], *, within_s: float = 5.0
    ) -> Stats:
        """Poll the counters until `predicate` holds; AssertionError (with the last stats) after
        `within_s` seconds."""

        async def probe() -> Stats:
            return self.stats()

        return await eventually(
            probe, predicate, what="the fake OpenAI reaches the condition", timeout_s=within_s
        )

    @contextlib.asynccontextmanager
    async def one_test(self) -> AsyncIterator[FakeOpenAI]:
        """A server shared by a module, fresh for each test: counters and scripts reset, and the
        test must leave it idle (no request of ours may outlive its test)."""
        self.reset()
        yield self
        await self.wait_until(lambda s: s.in_flight == 0)

    def start(self, timeout: float = 10.0) -> None:
        self._thread.start()
        if not self._ready.wait(timeout) or not self._server.started:
            self.stop()
            raise RuntimeError(f"fake OpenAI server did not start: {self._error!r}")

    def stop(self, timeout: float = 10.0) -> None:
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            # Ends hanging streams, which uvicorn's graceful shutdown would otherwise wait for.
            loop.call_soon_threadsafe(stopping.set)
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._socket.close()
        if self._thread.is_alive():
            raise RuntimeError("fake OpenAI server did not stop")
        if self._error is not None:
            raise RuntimeError("fake OpenAI server failed") from self._error

    async def __aenter__(self) -> FakeOpenAI:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)

    def _stopping_event(self) -> asyncio.Event:
        assert self._stopping is not None, "the app runs only while the server loop does"
        return self._stopping

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by stop(), not lost in a thread
            self._error = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        await self._server.serve(sockets=[self._socket])


async def fetch_stats(client: httpx.AsyncClient, url: str) -> Stats:
    """Stats of a fake in another process (`url` is its `url`, not its `base_url`)."""
    response = await client.get(f"{url}/_stats")
    response.raise_for_status()
    return Stats.from_json(response.json())
