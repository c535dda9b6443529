"""A response past its retention answers `410 Gone` on /v1, as its job does on /api/jobs
(server/gone.py), in OpenAI's error shape; the official SDK raises a plain `APIStatusError`."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx
import openai
import pytest
from openai import AsyncOpenAI

from jobstream.server.v1 import ids
from jobstream.settings import Settings
from jobstream.worker.janitor import Janitor
from tests.support.clock import ManualClock

AUTH = {"Authorization": "Bearer any"}
BODY = {"model": "simulated-1", "input": "hello", "background": True}


async def test_a_response_deleted_by_retention_answers_410_in_openais_shape(
    client: httpx.AsyncClient, base_url: str, pool: asyncpg.Pool, settings: Settings
) -> None:
    created = (await client.post("/v1/responses", json=BODY, headers=AUTH)).json()
    response_id = created["id"]
    # Cancelled while queued: finished at once, with no worker.
    done = await client.post(f"/v1/responses/{response_id}/cancel", headers=AUTH)
    assert done.json()["status"] == "cancelled", done.text

    # An hour on, past a retention of a minute: settled and deleted in one round, tombstoned.
    quiet = settings.replace(janitor=False, compact_after_s=0, retention_s=60, tombstone_s=600)
    clock = ManualClock(datetime.now(UTC) + timedelta(hours=1))
    janitor = Janitor(pool, quiet, clock=clock)
    round_ = await janitor.run_round()
    assert round_ is not None and (round_.settled, round_.deleted) == (1, 1)

    base = f"/v1/responses/{response_id}"
    for answer in (
        await client.get(base, headers=AUTH),
        await client.get(base, params={"stream": "true"}, headers=AUTH),
        await client.post(f"{base}/cancel", headers=AUTH),
        await client.delete(base, headers=AUTH),
    ):
        assert answer.status_code == 410, (answer.request.method, answer.request.url, answer.text)
        assert answer.headers["content-type"] == "application/json"
        error = answer.json()["error"]
        assert error == {
            "message": error["message"],
            "type": "invalid_request_error",
            "param": None,
            "code": "gone",
        }
        assert error["message"].startswith(f"Response {response_id} ended longer ago")
    # The job's own id, as /api/jobs gives it, names the same response.
    same = await client.get(f"/v1/responses/{ids.job_id(response_id)}", headers=AUTH)
    assert same.status_code == 410
    # An id never seen is still a 404.
    unknown = await client.get(f"/v1/responses/{ids.response_id(uuid.uuid4())}", headers=AUTH)
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "not_found")

    # The SDK has no class of its own for 410: the base APIStatusError, not NotFoundError, and
    # no retry (it retries 408, 409, 429 and 5xx only): one request a call.
    sent: list[object] = []

    async def count(request: object) -> None:
        sent.append(request)

    transport = openai.DefaultAsyncHttpxClient(event_hooks={"request": [count]})
    async with AsyncOpenAI(
        base_url=f"{base_url}/v1", api_key="sk-any", max_retries=2, http_client=transport
    ) as sdk:
        for call in (
            lambda: sdk.responses.retrieve(response_id),
            lambda: sdk.responses.retrieve(response_id, stream=True),
            lambda: sdk.responses.cancel(response_id),
            lambda: sdk.responses.delete(response_id),
        ):
            with pytest.raises(openai.APIStatusError) as raised:
                await call()
            assert type(raised.value) is openai.APIStatusError
            assert (raised.value.status_code, raised.value.code) == (410, "gone")
            assert raised.value.type == "invalid_request_error"
    assert len(sent) == 4

    # Once the tombstone is pruned the id is as unknown as any other.
    clock.advance(601)
    round_ = await janitor.run_round()
    assert round_ is not None and round_.tombstones_pruned == 1
    assert (await client.get(base, headers=AUTH)).status_code == 404
