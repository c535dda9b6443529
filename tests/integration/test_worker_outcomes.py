"""What a worker records for each way an attempt can end: statuses, attempts, events, backoff."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import timedelta
from decimal import Decimal

import asyncpg
import pytest
import structlog

from jobstream import claims, logs
from jobstream.prices import Price
from jobstream.settings import Settings
from jobstream.worker.providers.base import Prompt, ProviderRequest, StreamItem, TextDelta
from jobstream.worker.retry import Backoff
from tests.support.gated_provider import SIMULATED_PRICE, GatedProvider
from tests.support.workers import (
    attempt_rows,
    counted_text,
    create_job,
    event_list,
    fast,
    job_row,
    manual_clock,
    reassemble,
    running_worker,
    summary,
    wait_for_job,
    wait_for_status,
    wait_idle,
)

PRICE = Decimal("0.000002")  # the simulator's default price per output token


async def test_a_job_streams_to_success(pool: asyncpg.Pool, settings: Settings) -> None:
    job_id = await create_job(pool, prompt="one two three", simulate=fast(30))
    async with running_worker(settings, pool=pool) as worker:
        job = await wait_for_status(pool, job_id, "succeeded")
        await wait_idle(worker, what="the worker is idle")
    log = await event_list(pool, job_id)
    assert summary(log) == [
        (0, "status", "queued"),
        (1, "reset", None),
        (1, "status", "running"),
        (1, "usage", None),
        (1, "done", "succeeded"),
    ]
    assert [e.seq for e in log] == list(range(1, len(log) + 1))  # gap-free
    assert job["result"]["text"] == reassemble(log) == counted_text(30)
    assert log[-1].data["result"] == job["result"]
    (attempt,) = await attempt_rows(pool, job_id)
    assert attempt["outcome"] == "succeeded"
    assert (attempt["input_tokens"], attempt["output_tokens"]) == (3, 30)
    assert attempt["cost_usd"] == PRICE * 30 and attempt["cost_known"] is True
    assert job["lease_until"] is None and job["attempts"] == 1
    assert worker.results == {"succeeded": 1}


class ContextRecorder(GatedProvider):
    """Records the log context its stream runs in: the attempt's own (the pump is its child)."""

    def __init__(self) -> None:
        super().__init__(before=1)
        self.gate.set()
        self.context: dict[str, object] = {}

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamItem]:
        self.context = structlog.contextvars.get_contextvars() | logs.attempt_fields()
        async for item in super().stream(request):
            yield item


async def test_an_attempts_log_lines_name_its_job_attempt_and_run_token(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    # Read from the context the attempt's lines are logged in, not from captured lines: the
    # logging set-up is process-wide, and other tests configure it their own way.
    recorder = ContextRecorder()
    job_id = await create_job(pool)
    async with running_worker(settings, pool=pool, providers={"simulated": recorder}) as worker:
        await wait_for_status(pool, job_id, "succeeded")
        worker_context = structlog.contextvars.get_contextvars() | logs.attempt_fields()
    token = (await job_row(pool, job_id))["run_token"]  # the last attempt's, kept after it ends
    expected = {"job_id": str(job_id), "attempt": 1, "run_token": str(token)}
    assert {k: recorder.context.get(k) for k in expected} == expected
    assert recorder.context.get("worker_id") == worker.worker_id
    # The binding stays with the attempt: the caller's context names no job.
    assert "job_id" not in worker_context


async def test_token_deltas_are_coalesced_into_few_flushes(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    # Every token is 2-3 bytes: with an 8-byte threshold, each flush carries several tokens.
    job_id = await create_job(pool, simulate=fast(60))
    async with running_worker(settings.replace(flush_bytes=8, flush_interval_s=10), pool=pool):
        await wait_for_status(pool, job_id, "succeeded")
    tokens = [e.data["text"] for e in await event_list(pool, job_id) if e.type == "token"]
    assert "".join(tokens) == counted_text(60)
    assert 60 // 4 <= len(tokens) <= 60 // 2
    assert all(len(t.encode()) < 8 + 3 for t in tokens)


async def test_a_transient_fault_is_retried_after_its_jittered_backoff(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    clock = manual_clock()
    settings = settings.replace(backoff_base_s=2.0, backoff_max_s=60.0)
    fault = {"attempt": 1, "after_tokens": 3, "kind": "transient"}
    job_id = await create_job(pool, simulate=fast(10, faults=[fault]))
    async with running_worker(settings, pool=pool, clock=clock, rng=random.Random(5)) as worker:
        queued = await wait_for_job(
            pool, job_id, lambda j: j["status"] == "queued" and j["attempts"] == 1, what="retry"
        )
        # The worker's first draw from its rng: full jitter below base * 2**0.
        delay = Backoff(2.0, 60.0).delay(1, random.Random(5))
        assert 0 < delay < 2.0
        due = clock.now() + timedelta(seconds=delay)
        assert abs(queued["run_after"] - due) < timedelta(milliseconds=1)
        assert queued["error"] == {"class": "transient", "message": queued["error"]["message"]}
        # Not before its time: a claim now finds nothing.
        assert (
            await claims.claim(
                pool, providers=["simulated"], worker_id="probe", lease_s=30, clock=clock
            )
            is None
        )
        clock.advance(delay + 0.001)
        worker.wake()
        job = await wait_for_status(pool, job_id, "succeeded")
    log = await event_list(pool, job_id)
    assert summary(log) == [
        (0, "status", "queued"),
        (1, "reset", None),
        (1, "status", "running"),
        (1, "attempt_error", None),
        (1, "status", "queued"),
        (2, "reset", None),
        (2, "status", "running"),
        (2, "usage", None),
        (2, "done", "succeeded"),
    ]
    retry_event = next(e for e in log if e.type == "status" and e.attempt == 1 and e.seq > 3)
    assert retry_event.data["retry_at"] == queued["run_after"].isoformat()
    assert next(e for e in log if e.type == "reset" and e.attempt == 2).data["reason"] == (
        "retry after transient"
    )
    # The text of the failed attempt is dropped at the reset: the client sees only attempt 2's.
    assert reassemble(log) == job["result"]["text"] == counted_text(10)
    first, second = await attempt_rows(pool, job_id)
    assert (first["outcome"], first["error_class"]) == ("failed", "transient")
    assert first["output_tokens"] == 3 and first["cost_known"] is False
    assert second["outcome"] == "succeeded"
    assert worker.results == {"retry": 1, "succeeded": 1}


async def test_rate_limited_waits_out_retry_after_and_pauses_the_provider(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    clock = manual_clock()
    fault = {"attempt": 1, "after_tokens": 0, "kind": "rate_limited", "retry_after_s": 5}
    limited = await create_job(pool, simulate=fast(4, faults=[fault]))
    async with running_worker(settings, pool=pool, clock=clock) as worker:
        queued = await wait_for_job(
            pool, limited, lambda j: j["status"] == "queued" and j["attempts"] == 1, what="retry"
        )
        # Backoff is 0 in the test settings: Retry-After alone sets the delay.
        assert queued["run_after"] == clock.now() + timedelta(seconds=5)
        paused = await pool.fetchval(
            "SELECT paused_until FROM provider_state WHERE provider = 'simulated'"
        )
        assert paused == clock.now() + timedelta(seconds=5)
        # Every job of the provider waits, not only the one that met the 429.
        other = await create_job(pool, simulate=fast(4))
        worker.wake()
        assert (
            await claims.claim(
                pool, providers=["simulated"], worker_id="probe", lease_s=30, clock=clock
            )
            is None
        )
        assert (await job_row(pool, other))["status"] == "queued"
        clock.advance(5)
        worker.wake()
        await wait_for_status(pool, limited, "succeeded")
        await wait_for_status(pool, other, "succeeded")
    first, _ = await attempt_rows(pool, limited)
    assert (first["outcome"], first["error_class"]) == ("failed", "rate_limited")
    # Refused before any output: known to cost nothing.
    assert first["cost_usd"] == 0 and first["cost_known"] is True


async def test_a_permanent_fault_fails_the_job_at_once(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    fault = {"attempt": 1, "after_tokens": 2, "kind": "permanent"}
    job_id = await create_job(pool, simulate=fast(10, faults=[fault]), max_attempts=3)
    async with running_worker(settings, pool=pool) as worker:
        job = await wait_for_status(pool, job_id, "failed")
    assert job["error"]["class"] == "permanent" and job["attempts"] == 1
    assert summary(await event_list(pool, job_id))[-2:] == [
        (1, "attempt_error", None),
        (1, "done", "failed"),
    ]
    (attempt,) = await attempt_rows(pool, job_id)
    assert (attempt["outcome"], attempt["error_class"]) == ("failed", "permanent")
    assert worker.results == {"failed": 1}


@pytest.mark.parametrize(("kind", "error_class"), [("drop", "unknown"), ("timeout", "timeout")])
async def test_an_unknown_outcome_fails_the_job_unless_it_allows_retries(
    pool: asyncpg.Pool, settings: Settings, kind: str, error_class: str
) -> None:
    fault = {"attempt": 1, "after_tokens": 4, "kind": kind}
    job_id = await create_job(pool, simulate=fast(10, faults=[fault]), timeout_s=0.3)
    async with running_worker(settings, pool=pool):
        job = await wait_for_status(pool, job_id, "failed")
    assert job["error"]["class"] == error_class
    (attempt,) = await attempt_rows(pool, job_id)
    assert attempt["outcome"] == "unknown"
    # The provider may have billed the work: our estimate, flagged as such.
    assert attempt["output_tokens"] == 4
    assert attempt["cost_usd"] == PRICE * 4 and attempt["cost_known"] is False
    # The tokens it did stream were all persisted before the failure was recorded.
    log = await event_list(pool, job_id)
    assert reassemble(log) == counted_text(4)
    assert summary(log)[-2:] == [(1, "attempt_error", None), (1, "done", "failed")]


@pytest.mark.parametrize("kind", ["drop", "timeout"])
async def test_an_unknown_outcome_is_retried_when_the_job_allows_it(
    pool: asyncpg.Pool, settings: Settings, kind: str
) -> None:
    fault = {"attempt": 1, "after_tokens": 4, "kind": kind}
    job_id = await create_job(
        pool, simulate=fast(10, faults=[fault]), timeout_s=0.3, retry_unknown=True
    )
    async with running_worker(settings, pool=pool):
        job = await wait_for_status(pool, job_id, "succeeded")
    first, second = await attempt_rows(pool, job_id)
    assert (first["outcome"], second["outcome"]) == ("unknown", "succeeded")
    assert job["result"]["text"] == reassemble(await event_list(pool, job_id)) == counted_text(10)


async def test_a_job_whose_attempts_all_fail_is_dead(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    faults = [{"attempt": n, "after_tokens": 1, "kind": "transient"} for n in (1, 2, 3)]
    job_id = await create_job(pool, simulate=fast(5, faults=faults), max_attempts=3)
    async with running_worker(settings, pool=pool) as worker:
        job = await wait_for_status(pool, job_id, "dead")
    assert job["attempts"] == 3 and job["error"]["class"] == "transient"
    assert [a["outcome"] for a in await attempt_rows(pool, job_id)] == ["failed"] * 3
    assert summary(await event_list(pool, job_id))[-3:] == [
        (3, "status", "running"),
        (3, "attempt_error", None),
        (3, "done", "dead"),
    ]
    assert worker.results == {"retry": 2, "dead": 1}


class NulProvider:
    """Sends text with a U+0000 in it, as a model can."""

    name = "simulated"

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamItem]:
        for text in ("a\x00", "b"):
            yield TextDelta(text)

    def price(self, request: Prompt) -> Price:
        return SIMULATED_PRICE

    def estimate_cost(self, request: Prompt, output_tokens: int) -> Decimal:
        return Decimal(0)


async def test_nul_from_the_provider_is_stored_as_a_replacement_character(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    # Regression: jsonb refuses U+0000, so every flush of such text failed and the attempt was
    # retried until the job was dead, paying the provider each time.
    job_id = await create_job(pool, prompt="nul")
    async with running_worker(settings, pool=pool, providers={"simulated": NulProvider()}):
        job = await wait_for_status(pool, job_id, "succeeded")
    assert job["result"]["text"] == "a\ufffdb" == reassemble(await event_list(pool, job_id))
    assert job["attempts"] == 1
