"""One job's trace, from the client's request to its result, across the server and the worker.

The server (a real uvicorn) and a Worker run in this process on one TracerProvider with an
in-memory exporter, but nothing links their spans in memory: the create runs in uvicorn's
task, the worker's attempts in tasks of their own, and the only way the worker learns the
create's context is the traceparent stored with the job (jobs.traceparent). A job whose stored
context is wiped before the worker claims it starts a trace of its own, which shows it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import asyncpg
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from jobstream import tracing
from jobstream.server.app import create_app
from jobstream.settings import Settings
from tests.support import user_jobs
from tests.support.fake_openai import FakeOpenAI
from tests.support.http_server import http_client, serve
from tests.support.polling import eventually
from tests.support.workers import fast, running_worker, wait_for_status

pytestmark = pytest.mark.timeout(60)

# The client's own span: the create continues its trace.
CLIENT_TRACE = 0x4BF92F3577B34DA6A3CE929D0E0E4736
CLIENT_SPAN = 0x00F067AA0BA902B7
TRACEPARENT = f"00-{CLIENT_TRACE:032x}-{CLIENT_SPAN:016x}-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on for this test (server and worker alike), each span exported as it ends."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        yield exporter
    finally:
        tracing.use(None)
        provider.shutdown()


def of_job(finished: Sequence[ReadableSpan], job_id: str) -> dict[str, list[ReadableSpan]]:
    """The job's spans by name: the worker's carry its id; the rest hang from its attempts."""
    attempts = [s for s in finished if attrs(s).get("jobstream.job.id") == job_id]
    by_name: dict[str, list[ReadableSpan]] = {}
    for span in attempts:
        by_name.setdefault(span.name, []).append(span)
    trace_id = attempts[0].context.trace_id
    for span in finished:
        if span.context.trace_id == trace_id and span not in attempts:
            by_name.setdefault(span.name, []).append(span)
    return by_name


def attrs(span: ReadableSpan) -> Mapping[str, Any]:
    return span.attributes or {}


def times(span: ReadableSpan) -> tuple[int, int]:
    assert span.start_time is not None and span.end_time is not None, "an ended span"
    return span.start_time, span.end_time


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def test_a_jobs_trace_runs_from_the_clients_request_through_the_database_to_its_result(
    pool: asyncpg.Pool, settings: Settings, spans: InMemorySpanExporter
) -> None:
    async with serve(create_app(settings)) as url, http_client(url, timeout=30) as api:
        body = {"prompt": "one two three", "simulate": fast(5)}
        response = await api.post("/api/jobs", json=body, headers={"traceparent": TRACEPARENT})
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        # A second job, its stored context wiped: the worker has nothing else to go on.
        other = await api.post("/api/jobs", json=body)
        assert other.status_code == 202, other.text
        other_id = other.json()["id"]
    await pool.execute("UPDATE jobs SET traceparent = NULL WHERE id = $1", uuid.UUID(other_id))
    create = next(s for s in spans.get_finished_spans() if s.name == "POST /api/jobs")
    stored = await pool.fetchval("SELECT traceparent FROM jobs WHERE id = $1", uuid.UUID(job_id))
    assert stored == f"00-{CLIENT_TRACE:032x}-{create.context.span_id:016x}-01"

    async with running_worker(settings, pool=pool):
        await wait_for_status(pool, uuid.UUID(job_id), "succeeded")
        await wait_for_status(pool, uuid.UUID(other_id), "succeeded")
    tree = of_job(spans.get_finished_spans(), job_id)

    # One trace, the client's, in one tree: client -> create -> claim, attempt -> provider call.
    (create,) = tree["POST /api/jobs"]
    (claim,) = tree["job.claim"]
    (attempt,) = tree["job.attempt"]
    (call,) = tree["llm.call"]
    assert {s.context.trace_id for s in (create, claim, attempt, call)} == {CLIENT_TRACE}
    assert create.kind == SpanKind.SERVER and parent_of(create) == CLIENT_SPAN
    assert create.parent is not None and create.parent.is_remote
    assert parent_of(claim) == parent_of(attempt) == create.context.span_id
    # The attempt's parent came from outside the worker: the stored context, read back.
    assert attempt.parent is not None and attempt.parent.is_remote
    assert parent_of(call) == attempt.context.span_id
    assert attrs(create)["http.response.status_code"] == 202
    run_token = await pool.fetchval("SELECT run_token FROM jobs WHERE id = $1", uuid.UUID(job_id))
    expected = {
        "jobstream.job.id": job_id,
        "jobstream.job.name": "llm",
        "jobstream.job.attempt": 1,
        "jobstream.job.run_token": str(run_token),
        "jobstream.attempt.result": "succeeded",
    }
    assert {name: attrs(attempt).get(name) for name in expected} == expected
    assert attrs(call)["gen_ai.provider.name"] == "simulated"
    assert attrs(call)["gen_ai.usage.output_tokens"] == 5
    # The times nest: the request before the claim, the claim before the attempt's end.
    assert times(create)[1] <= times(claim)[0] <= times(claim)[1] <= times(attempt)[1]

    # The job without a stored context: its attempt is the root of another trace.
    orphan = of_job(spans.get_finished_spans(), other_id)
    (lone,) = orphan["job.attempt"]
    assert lone.parent is None and lone.context.trace_id != CLIENT_TRACE


async def test_a_user_jobs_steps_and_their_calls_hang_from_its_attempt_from_a_batch_create(
    pool: asyncpg.Pool,
    ai_settings: Settings,
    fake: FakeOpenAI,
    spans: InMemorySpanExporter,
) -> None:
    async with (
        serve(create_app(ai_settings, jobs=user_jobs.app)) as url,
        http_client(url, timeout=30) as api,
    ):
        item = {"job": "three_steps", "input": {"topic": "traces"}}
        response = await api.post("/api/jobs/batch", json={"jobs": [item]})
        assert response.status_code == 200, response.text
        job_id = response.json()["results"][0]["id"]
    async with running_worker(ai_settings, pool=pool, app=user_jobs.app):
        await wait_for_status(pool, uuid.UUID(job_id), "succeeded")
    # The attempt's span ends after the success is recorded; the worker has stopped since.
    await eventually(
        lambda: _named(spans, "job.attempt"), lambda n: n >= 1, what="the attempt's span"
    )
    tree = of_job(spans.get_finished_spans(), job_id)
    (create,) = tree["POST /api/jobs/batch"]
    (attempt,) = tree["job.attempt"]
    steps = sorted(tree["job.step"], key=lambda s: times(s)[0])
    calls = sorted(tree["llm.call"], key=lambda s: times(s)[0])
    assert create.parent is None  # no traceparent sent: the create starts the trace
    assert parent_of(attempt) == create.context.span_id and attempt.parent is not None
    assert attempt.parent.is_remote
    assert attrs(attempt)["jobstream.job.name"] == "three_steps"
    assert [attrs(s)["jobstream.step.name"] for s in steps] == ["first", "second", "third"]
    assert {parent_of(s) for s in steps} == {attempt.context.span_id}
    assert [parent_of(c) for c in calls] == [s.context.span_id for s in steps]
    assert all(attrs(s)["jobstream.step.replayed"] is False for s in steps)
    assert {s.context.trace_id for s in [create, attempt, *steps, *calls]} == {
        create.context.trace_id
    }


async def _named(spans: InMemorySpanExporter, name: str) -> int:
    return sum(1 for s in spans.get_finished_spans() if s.name == name)
