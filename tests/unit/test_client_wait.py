"""The client's `wait`: it polls a job to its end, pausing as long as each answer advises
(Retry-After, else estimated_remaining_sec), kept between its intervals, and doubling its
shortest pause while no answer advises anything. Against scripted answers; the pauses are
measured through an injected sleep. (Against a live server: tests/integration/test_estimates.py.)
"""

from __future__ import annotations

from typing import Any

import httpx

from jobstream.client import AsyncClient

JOB_ID = "0191a6f0-0000-7000-8000-000000000002"


def answer(
    status: str, remaining: float | None = None, retry_after: str | None = None
) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    body = {"id": JOB_ID, "status": status, "estimated_remaining_sec": remaining}
    return httpx.Response(200, json=body, headers=headers)


async def waited(
    answers: list[httpx.Response], **options: Any
) -> tuple[dict[str, Any], list[float]]:
    """What `wait` returned, and each pause it took, given the answers to its polls in order."""
    script = iter(answers)
    slept: list[float] = []

    def handle(request: httpx.Request) -> httpx.Response:
        assert request.url.path == f"/api/jobs/{JOB_ID}"
        return next(script)

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    http = httpx.AsyncClient(transport=httpx.MockTransport(handle), base_url="http://jobs.test")
    async with AsyncClient("http://jobs.test", http=http, sleep=sleep) as client:
        job = await client.wait(JOB_ID, **options)
    return job, slept


async def test_it_pauses_as_retry_after_says_before_the_estimate() -> None:
    job, slept = await waited(
        [
            answer("queued", remaining=7.5, retry_after="8"),
            answer("running", remaining=3.2, retry_after="4"),
            answer("running", remaining=2.5),  # no header: the estimate
            answer("succeeded"),
        ]
    )
    assert job["status"] == "succeeded"
    assert slept == [8.0, 4.0, 2.5]


async def test_advice_is_kept_between_the_intervals() -> None:
    _, slept = await waited(
        [
            answer("running", retry_after="120"),
            answer("running", remaining=0.1),
            answer("dead"),
        ],
        min_interval_s=0.5,
        max_interval_s=30.0,
    )
    assert slept == [30.0, 0.5]


async def test_without_advice_the_pause_doubles_up_to_the_longest() -> None:
    _, slept = await waited(
        [*(answer("queued") for _ in range(5)), answer("cancelled")],
        min_interval_s=1.0,
        max_interval_s=6.0,
    )
    assert slept == [1.0, 2.0, 4.0, 6.0, 6.0]


async def test_a_job_already_ended_is_returned_without_a_pause() -> None:
    job, slept = await waited([answer("failed")])
    assert job["status"] == "failed"
    assert slept == []
