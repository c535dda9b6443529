"""`messages` as an alternative to `prompt` on POST /api/jobs (issue 12): stored, run by the
simulated provider from the last user message, shown as the job's prompt, refused field by field
when malformed."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import httpx

from jobstream.settings import Settings
from tests.support.simulated_text import expected_text
from tests.support.workers import fast, running_worker, wait_for_status

CONVERSATION = [
    {"role": "system", "content": "You answer in few words."},
    {"role": "user", "content": "what is red"},
    {"role": "assistant", "content": [{"type": "text", "text": "a colour"}]},
    {
        "role": "user",
        "content": [{"type": "text", "text": "and "}, {"type": "text", "text": "blue"}],
    },
]


async def test_a_job_of_messages_runs_on_the_last_user_message(
    client: httpx.AsyncClient, pool: asyncpg.Pool, settings: Settings
) -> None:
    body = {"messages": CONVERSATION, "temperature": 0.5, "simulate": fast(4, pattern="words")}
    created = await client.post("/api/jobs", json=body)
    assert created.status_code == 202, created.text
    job_id = uuid.UUID(created.json()["id"])
    async with running_worker(settings):
        await wait_for_status(pool, job_id, "succeeded")
    job = (await client.get(f"/api/jobs/{job_id}")).json()
    assert job["prompt"] == "and blue"  # what the page shows as the prompt
    assert job["result"]["text"] == expected_text("and blue", 4)
    payload = await pool.fetchval("SELECT payload FROM jobs WHERE id = $1", job_id)
    assert payload["messages"][2] == {"role": "assistant", "content": "a colour"}
    assert payload["sampling"] == {"temperature": 0.5}


async def test_the_same_messages_under_one_key_are_one_job(client: httpx.AsyncClient) -> None:
    headers = {"Idempotency-Key": f"messages-{uuid.uuid4()}"}
    first = await client.post("/api/jobs", json={"messages": CONVERSATION}, headers=headers)
    again = await client.post("/api/jobs", json={"messages": CONVERSATION}, headers=headers)
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json()["id"] == first.json()["id"]
    other = await client.post("/api/jobs", json={"messages": CONVERSATION[:2]}, headers=headers)
    assert other.status_code == 409


# Each malformed body, and the fields its 422 names.
MALFORMED: list[tuple[dict[str, Any], list[str]]] = [
    ({"prompt": "x", "messages": CONVERSATION}, ["prompt"]),
    ({"messages": []}, ["messages"]),
    ({"messages": "hello"}, ["messages"]),
    ({"messages": [{"role": "robot", "content": "hi"}]}, ["messages[0].role"]),
    ({"messages": [{"role": "user"}]}, ["messages[0].content"]),
    ({"messages": [{"role": "user", "content": ""}]}, ["messages[0].content"]),
    (
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]},
        ["messages[0].content[0]"],
    ),
    ({"messages": [{"role": "user", "content": "hi", "name": "x"}]}, ["messages[0].name"]),
    ({"messages": [{"role": "user", "content": "a\x00b"}]}, ["messages[0].content"]),
    ({"prompt": "x", "temperature": 3, "top_p": -1}, ["temperature", "top_p"]),
    ({"prompt": "x", "instructions": ""}, ["instructions"]),
]


async def test_malformed_messages_are_422_naming_each_field(client: httpx.AsyncClient) -> None:
    # One server for every case: a server per case cost most of this file's time.
    for body, fields in MALFORMED:
        response = await client.post("/api/jobs", json=body)
        assert response.status_code == 422, (body, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        assert [error["field"] for error in response.json()["errors"]] == fields, body
