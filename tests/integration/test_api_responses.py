"""`POST /v1/responses` in background mode answers from the create's own row: what a read right
after shows, with no worker to move the job on."""

from __future__ import annotations

import httpx

BODY = {"model": "simulated-1", "input": "hello", "background": True, "metadata": {"k": "v"}}


async def test_a_background_create_answers_what_a_read_shows(client: httpx.AsyncClient) -> None:
    headers = {"Authorization": "Bearer any", "Idempotency-Key": "responses-1"}
    created = await client.post("/v1/responses", json=BODY, headers=headers)
    assert created.status_code == 200, created.text
    body = created.json()
    assert (body["status"], body["output"], body["metadata"]) == ("queued", [], {"k": "v"})
    read = await client.get(f"/v1/responses/{body['id']}", headers=headers)
    assert read.status_code == 200
    assert read.json() == body
    # The replay reads the job as it is now: the same, since nothing ran it.
    again = await client.post("/v1/responses", json=BODY, headers=headers)
    assert again.json() == body
