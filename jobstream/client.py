"""The Python client: submit, get, list, cancel and retry jobs, and follow one to its end.

    from jobstream.client import Client

    with Client("http://127.0.0.1:8000") as client:
        job = client.submit("Explain leases")  # or client.submit_job("answer", {"text": ...})
        for item in client.follow(job["id"]):
            print(item.text if isinstance(item, Text) else "", end="", flush=True)

`AsyncClient` is the same with `await` and `async for`. `follow` resumes by itself after a lost
connection or a server restart (from the last event it saw: nothing repeated, nothing lost) and
yields `Text` (the next chunk), `Reset` (drop what you have, start again from its `text`: a new
attempt began, or the log was compacted and the snapshot stands in for it), `Progress` (what a
job of your own reported of its progress) and, last, `Result`. Where no stream can stay open,
`wait` polls the job to its end, as often as the server's estimate of its remaining time says.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from jobstream.follower import Follower, FollowError
from jobstream.types import TERMINAL_STATUSES

DEFAULT_URL = "http://127.0.0.1:8000"
# A POST lost on the way (a connection reset) is sent again: every POST here is safe to repeat
# (create with its idempotency key, cancel and retry by their nature).
REQUEST_TRIES = 3
# `wait`'s polls: never closer than the first, never further apart than the second, whatever
# the server advises.
MIN_POLL_INTERVAL_S = 0.5
MAX_POLL_INTERVAL_S = 30.0
T = TypeVar("T")


class ClientError(Exception):
    """Base of what the client raises."""


class Refused(ClientError):
    """The server answered with a problem (4xx): retrying the same request cannot help."""

    def __init__(self, status: int, title: str, detail: str) -> None:
        super().__init__(f"{status} {title}: {detail}")
        self.status = status
        self.title = title
        self.detail = detail


class Unreachable(ClientError):
    """No answer from the server after a few tries."""


@dataclass(frozen=True)
class Text:
    """The next chunk of the current attempt's text."""

    text: str
    attempt: int
    seq: int  # the event's id: `follow(job_id, after=seq)` goes on after it


@dataclass(frozen=True)
class Reset:
    """Drop the text so far and start again from `text`: attempt `attempt` began (`text` is
    empty), or the log before the cursor was pruned (`text` is the snapshot's)."""

    attempt: int
    reason: str | None
    seq: int
    text: str = ""


@dataclass(frozen=True)
class Progress:
    """A job of your own reported how far it has got: `fraction` from 0 to 1, and a note."""

    fraction: float
    message: str | None
    attempt: int
    seq: int


@dataclass(frozen=True)
class Result:
    """The job ended: `status` is succeeded, failed, cancelled or dead. `output` is a named
    job's validated output (any JSON value) when it succeeded, else None."""

    status: str
    text: str
    error: dict[str, Any] | None = None
    job: dict[str, Any] = field(default_factory=dict)
    output: Any = None

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"


FollowItem = Text | Reset | Progress | Result


class AsyncClient:
    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        on_retry: Callable[[float, str], None] | None = None,
        http: httpx.AsyncClient | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """`on_retry(delay_s, reason)` hears of each reconnect of a follow; `sleep` is how
        `wait` waits between polls (a test's own measures them)."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # No read timeout: a stream may be quiet for as long as the model thinks.
        self._http = http or httpx.AsyncClient(
            base_url=url, timeout=httpx.Timeout(10.0, read=None), headers=headers
        )
        self.url = url
        self._on_retry = on_retry
        self._sleep = sleep

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def submit(
        self, prompt: str | None = None, *, idempotency_key: str | None = None, **fields: Any
    ) -> dict[str, Any]:
        """Create a job (`fields` are POST /api/jobs's: provider, model, simulate...)."""
        body = ({"prompt": prompt} if prompt is not None else {}) | fields
        # The key makes a repeated POST (the first answer lost on the way) return the same job.
        key = idempotency_key or str(uuid.uuid4())
        return await self._request("POST", "/api/jobs", json=body, headers={"Idempotency-Key": key})

    async def submit_job(
        self,
        name: str,
        input: dict[str, Any],
        *,
        idempotency_key: str | None = None,
        **envelope: Any,
    ) -> dict[str, Any]:
        """Create a job of the registered job `name` with its `input`; `envelope` is the rest of
        POST /api/jobs's fields (priority, max_attempts, run_at, metadata...)."""
        return await self.submit(
            idempotency_key=idempotency_key, **{"job": name, "input": input} | envelope
        )

    async def batch(self, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Create up to 1,000 jobs in one request: one answer per job, in order (its create
        body, or the problem that refused it). Each gets an idempotency key if it has none."""
        for job in jobs:
            if isinstance(job, dict):  # anything else is the server's to refuse, in its place
                job.setdefault("idempotency_key", str(uuid.uuid4()))
        answer = await self._request("POST", "/api/jobs/batch", json={"jobs": jobs})
        results: list[dict[str, Any]] = answer["results"]
        return results

    async def get(self, job_id: str) -> dict[str, Any]:
        return await self._request("GET", f"/api/jobs/{job_id}")

    async def wait(
        self,
        job_id: str,
        *,
        min_interval_s: float = MIN_POLL_INTERVAL_S,
        max_interval_s: float = MAX_POLL_INTERVAL_S,
    ) -> dict[str, Any]:
        """Poll the job until it has ended, and return it (as `get` does). Between polls it
        waits what the server advises, `Retry-After` or else `estimated_remaining_sec`, kept
        between the two intervals; with no advice (no estimate yet), `min_interval_s` doubling
        up to `max_interval_s`. No deadline of its own: wrap it in `asyncio.timeout`.
        `follow` tells of the end at once, with the text as it comes; this is for callers that
        cannot keep a stream open."""
        unadvised = min_interval_s
        while True:
            response = await self._send("GET", f"/api/jobs/{job_id}")
            job: dict[str, Any] = response.json()
            if job["status"] in TERMINAL_STATUSES:
                return job
            delay = advised_delay(response, job)
            if delay is None:
                delay, unadvised = unadvised, min(unadvised * 2, max_interval_s)
            await self._sleep(min(max(delay, min_interval_s), max_interval_s))

    async def list(
        self, *, status: str | None = None, limit: int = 20, cursor: str | None = None
    ) -> dict[str, Any]:
        """One page, newest first: `{"jobs": [...], "next_cursor"}` (None on the last page)."""
        params: dict[str, str | int] = {"limit": limit}
        params |= {"status": status} if status else {}
        params |= {"cursor": cursor} if cursor else {}
        return await self._request("GET", "/api/jobs", params=params)

    async def cancel(self, job_id: str) -> dict[str, Any]:
        return await self._request("POST", f"/api/jobs/{job_id}/cancel")

    async def retry(self, job_id: str) -> dict[str, Any]:
        """Retry a dead job: a new job, `retry_of` it (asked again, the same new job)."""
        return await self._request("POST", f"/api/jobs/{job_id}/retry")

    async def events(self, job_id: str, *, after: int = 0) -> AsyncIterator[dict[str, Any]]:
        """Every event after `after`, as sent, until `done`; resumes by itself."""
        follower = Follower(self._http, job_id, after=after, on_retry=self._on_retry)
        try:
            async for event in follower.events():
                if event["type"] == "resync":
                    # The log before first_seq was pruned: the snapshot stands in for it.
                    snapshot = await self.get(job_id)
                    follower.resume_from(snapshot["last_seq"])
                    event = {**event, "snapshot": snapshot}
                yield event
        except FollowError as exc:
            raise Refused(exc.status, "Refused", exc.detail) from None
        except httpx.TransportError as exc:
            raise Unreachable(f"cannot reach {self.url}: {exc or type(exc).__name__}") from exc

    async def follow(self, job_id: str, *, after: int = 0) -> AsyncIterator[FollowItem]:
        """Text, resets and, last, the Result: see the module's docstring."""
        text, attempt, done = "", 0, None
        async for event in self.events(job_id, after=after):
            kind = event["type"]
            if kind == "token":
                text += event["text"]
                yield Text(event["text"], event.get("attempt", attempt), event["seq"])
            elif kind == "reset":
                text, attempt = "", event.get("attempt", attempt + 1)
                yield Reset(attempt, event.get("reason"), event["seq"])
            elif kind == "progress":
                yield Progress(
                    event["fraction"],
                    event.get("message"),
                    event.get("attempt", attempt),
                    event["seq"],
                )
            elif kind == "resync":
                snapshot = event["snapshot"]
                text = snapshot["output"]["text"]
                attempt = snapshot["output"].get("attempt") or attempt
                yield Reset(attempt, "resync", snapshot["last_seq"], text)
            elif kind == "done":
                done = event
        job = await self.get(job_id)  # the links (retried_as), and the end when resumed past it
        status = done["status"] if done else job["status"]
        result = (done or job).get("result") or {}
        error = (done or job).get("error")
        succeeded = status == "succeeded"
        yield Result(
            status,
            result.get("text", text) if succeeded else text,
            error,
            job,
            result.get("output") if succeeded else None,
        )

    async def _request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        body: dict[str, Any] = (await self._send(method, path, **kw)).json()
        return body

    async def _send(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """The answer to the request, sent again after a lost connection; a 4xx/5xx raised."""
        for attempt in range(REQUEST_TRIES):
            try:
                response = await self._http.request(method, path, **kw)
            except httpx.TransportError as exc:
                if attempt == REQUEST_TRIES - 1:
                    raise Unreachable(
                        f"cannot reach {self.url}: {exc or type(exc).__name__}"
                    ) from exc
                await asyncio.sleep(0.5 * 2**attempt)
                continue
            if response.status_code >= 400:
                raise _refusal(response)
            return response
        raise AssertionError("unreachable")


def advised_delay(response: httpx.Response, job: dict[str, Any]) -> float | None:
    """Seconds until a poll of the job is worth it, as the server advises: its Retry-After (in
    seconds; a date is not sent for jobs), else its estimate of the job's remaining time."""
    header = response.headers.get("retry-after", "")
    if header.isascii() and header.isdigit():
        return float(header)
    remaining = job.get("estimated_remaining_sec")
    if isinstance(remaining, int | float) and not isinstance(remaining, bool):
        return float(remaining)
    return None


def _refusal(response: httpx.Response) -> Refused:
    try:
        problem = response.json()
    except ValueError:
        return Refused(response.status_code, "Error", response.text[:200])
    return Refused(response.status_code, str(problem.get("title")), str(problem.get("detail")))


class Client:
    """The blocking client: AsyncClient's methods, run on an event loop of its own. Not for use
    inside a running event loop (use AsyncClient there)."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        on_retry: Callable[[float, str], None] | None = None,
    ) -> None:
        self._runner = asyncio.Runner()
        self._async = AsyncClient(url, api_key=api_key, on_retry=on_retry)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._runner.run(self._async.aclose())
        self._runner.close()

    def submit(
        self, prompt: str | None = None, *, idempotency_key: str | None = None, **fields: Any
    ) -> dict[str, Any]:
        return self._runner.run(
            self._async.submit(prompt, idempotency_key=idempotency_key, **fields)
        )

    def submit_job(
        self,
        name: str,
        input: dict[str, Any],
        *,
        idempotency_key: str | None = None,
        **envelope: Any,
    ) -> dict[str, Any]:
        return self._runner.run(
            self._async.submit_job(name, input, idempotency_key=idempotency_key, **envelope)
        )

    def batch(self, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self._runner.run(self._async.batch(jobs))

    def get(self, job_id: str) -> dict[str, Any]:
        return self._runner.run(self._async.get(job_id))

    def wait(
        self,
        job_id: str,
        *,
        min_interval_s: float = MIN_POLL_INTERVAL_S,
        max_interval_s: float = MAX_POLL_INTERVAL_S,
    ) -> dict[str, Any]:
        return self._runner.run(
            self._async.wait(job_id, min_interval_s=min_interval_s, max_interval_s=max_interval_s)
        )

    def list(
        self, *, status: str | None = None, limit: int = 20, cursor: str | None = None
    ) -> dict[str, Any]:
        return self._runner.run(self._async.list(status=status, limit=limit, cursor=cursor))

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self._runner.run(self._async.cancel(job_id))

    def retry(self, job_id: str) -> dict[str, Any]:
        return self._runner.run(self._async.retry(job_id))

    def events(self, job_id: str, *, after: int = 0) -> Iterator[dict[str, Any]]:
        return self._iterate(self._async.events(job_id, after=after))

    def follow(self, job_id: str, *, after: int = 0) -> Iterator[FollowItem]:
        return self._iterate(self._async.follow(job_id, after=after))

    def _iterate(self, items: AsyncIterator[T]) -> Iterator[T]:
        async def next_item() -> T:
            return await anext(items)

        try:
            while True:
                try:
                    yield self._runner.run(next_item())
                except StopAsyncIteration:
                    return
        finally:
            aclose = getattr(items, "aclose", None)
            if aclose is not None:
                self._runner.run(aclose())
