"""A client that follows one job's events over SSE and survives any disconnect.

It does what a browser's EventSource does, and a little more: after a dropped connection, a
server restart or a stream the server ended early, it reconnects with the last id it saw (so
nothing is repeated or lost) after a backoff, until the server ends the stream after `done`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import httpx
import orjson

from jobstream import sse

BACKOFF_MAX_S = 10.0


class FollowError(Exception):
    """The server refused to stream this job (unknown job, bad request): retrying cannot help."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


class Follower:
    def __init__(
        self,
        client: httpx.AsyncClient,
        job_id: str,
        *,
        after: int = 0,
        backoff_max_s: float = BACKOFF_MAX_S,
        on_retry: Callable[[float, str], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._client = client
        self._path = f"/api/jobs/{job_id}/events"
        self.cursor = after  # the last seq seen: what a reconnect resumes from
        self._backoff_max_s = backoff_max_s
        self._on_retry = on_retry
        self._rng = rng or random.Random()
        self._retry_s = 1.0  # until the server's `retry:` says otherwise
        self._restart = False
        self._complete = False

    def resume_from(self, cursor: int) -> None:
        """Drop the current connection and go on from `cursor` (after a `resync`)."""
        self.cursor = cursor
        self._restart = True

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """Every event after the cursor, each once, until the stream ends after `done`."""
        failures = 0
        while True:
            ended_after_done = False
            not_before_s = 0.0  # the server's Retry-After, when it said one
            try:
                async with contextlib.aclosing(self._connection()) as connection:
                    async for event in connection:
                        failures = 0
                        ended_after_done = event["type"] == "done"
                        yield event
                        if self._restart:
                            break
                    else:
                        if ended_after_done or self._complete:
                            return
                reason = "the stream ended early"
            except httpx.TransportError as exc:
                reason = str(exc) or type(exc).__name__
            except _ServerError as exc:
                reason = str(exc)
            except _TryLater as exc:
                reason, not_before_s = str(exc), exc.retry_after_s
            if self._restart:
                self._restart = False
                continue
            # The server's retry interval first, then doubling, with jitter so a fleet of
            # clients dropped at once by a restart does not come back at once; never sooner
            # than a 429's Retry-After.
            delay = min(self._retry_s * 2**failures, self._backoff_max_s)
            delay = max(delay * (0.5 + self._rng.random() / 2), not_before_s)
            failures += 1
            if self._on_retry is not None:
                self._on_retry(delay, reason)
            await asyncio.sleep(delay)

    async def _connection(self) -> AsyncGenerator[dict[str, Any], None]:
        headers = {"Accept": "text/event-stream", "Last-Event-ID": str(self.cursor)}
        async with self._client.stream("GET", self._path, headers=headers) as response:
            if response.status_code == 204:
                # The job is finished and the cursor is at (or past) its end: nothing will come.
                self._complete = True
                return
            if response.status_code >= 500:
                raise _ServerError(f"server error {response.status_code}")
            if response.status_code == 429:
                # Too many streams open for the job's tenant on that server: one may end soon.
                await response.aread()
                raise _TryLater(_retry_after(response), f"429: {_detail(response)}")
            if response.status_code != 200:
                await response.aread()
                raise FollowError(response.status_code, _detail(response))
            async for item in sse.items(response):
                if isinstance(item, sse.Retry):
                    self._retry_s = item.ms / 1000
                elif isinstance(item, sse.Message):
                    event: dict[str, Any] = orjson.loads(item.data)
                    if item.id is not None:
                        self.cursor = int(item.id)
                    yield event


class _ServerError(Exception):
    """A 5xx: this replica is in trouble; another try (maybe another replica) may work."""


class _TryLater(Exception):
    """A 429: refused for now, to be asked again no sooner than `retry_after_s`."""

    def __init__(self, retry_after_s: float, reason: str) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s


def _retry_after(response: httpx.Response) -> float:
    """Retry-After in seconds (its date form, which this server never sends, counts as 0)."""
    raw = response.headers.get("retry-after", "")
    return float(raw) if raw.isascii() and raw.isdigit() else 0.0


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", response.text))
    except ValueError:
        return response.text[:200]
