"""Regression (issue 9, defect 4): an operator's retry of a dead job appended after its `done`.

The contract calls `done` terminal, yet followers of the dead job never learned of the retry, a
reader from 0 met `done(dead)` mid-log, and a second terminal webhook went out for the same job. A
retry is now a new job (`retry_of` the dead one, which gains `retried_as`): every log ends with
its one `done`, and every job sends one terminal webhook.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import httpx

from jobstream import creates
from jobstream.follower import Follower
from jobstream.jobspec import JobSpec
from tests.support import attempt_driver as drive
from tests.support.dead_jobs import DEATH, delayed, die
from tests.support.polling import signalled
from tests.support.sse_client import Received, read_stream, reassemble


async def dead_job(client: httpx.AsyncClient, pool: asyncpg.Pool, *, tokens: int = 5) -> str:
    response = await client.post("/api/jobs", json=delayed(tokens))
    assert response.status_code == 202, response.text
    job_id: str = response.json()["id"]
    await die(pool, uuid.UUID(job_id), drive.count_tokens(0, 2))
    return job_id


async def retry(client: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    response = await client.post(f"/api/jobs/{job_id}/retry")
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    return body


async def run_to_success(pool: asyncpg.Pool, job_id: str, tokens: int) -> str:
    """The retry's one attempt, as a worker would run it: the next job claimed must be it."""
    held = await drive.claim(pool)
    assert str(held.job_id) == job_id
    text = "".join(drive.count_tokens(0, tokens))
    await drive.tokens(pool, held, drive.count_tokens(0, tokens))
    await drive.succeed(pool, held, text)
    return text


def one_done_at_the_end(log: list[dict[str, Any]]) -> dict[str, Any]:
    """The log's `done`, checked to be its only one and its last event, after gap-free seqs."""
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    assert [e["type"] for e in log].count("done") == 1, [e["type"] for e in log]
    assert log[-1]["type"] == "done"
    return log[-1]


async def followed(client: httpx.AsyncClient, job_id: str, after: int = 0) -> list[dict[str, Any]]:
    """Everything the Python follower yields for the job, until it stops by itself."""
    return [event async for event in Follower(client, job_id, after=after).events()]


async def test_a_retry_is_a_new_job_linked_both_ways_and_asking_again_is_the_same_retry(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    job_id = await dead_job(client, pool)
    # Asked five times at once (an operator's answer was lost, a script retried): one retry.
    answers = await asyncio.gather(*(client.post(f"/api/jobs/{job_id}/retry") for _ in range(5)))
    assert sorted(a.status_code for a in answers) == [200, 200, 200, 200, 202]
    response = next(a for a in answers if a.status_code == 202)
    new = response.json()
    assert new["id"] != job_id
    assert (new["status"], new["retry_of"], new["retried_as"]) == ("queued", job_id, None)
    assert response.headers["location"] == new["poll_url"] == f"/api/jobs/{new['id']}"
    assert new["events_url"].startswith(f"/api/jobs/{new['id']}/events?token=")
    for again in answers:
        assert again.json()["id"] == new["id"] and again.headers["location"] == new["poll_url"]
        if again is not response:
            assert again.headers["idempotent-replayed"] == "true"
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 2
    old = (await client.get(f"/api/jobs/{job_id}")).json()
    assert (old["status"], old["retried_as"], old["retry_of"]) == ("dead", new["id"], None)
    assert old["error"] == DEATH
    fresh = (await client.get(f"/api/jobs/{new['id']}")).json()
    assert (fresh["retry_of"], fresh["attempts"], fresh["output"]["text"]) == (job_id, 0, "")
    listed = (await client.get("/api/jobs", params={"status": "dead"})).json()["jobs"]
    assert [(j["id"], j["retried_as"]) for j in listed] == [(job_id, new["id"])]
    # The new job is in its tenant's list, newest first.
    everything = (await client.get("/api/jobs")).json()["jobs"]
    assert [j["id"] for j in everything] == [new["id"], job_id]


async def test_a_reader_from_0_meets_one_done_at_the_end_of_each_log(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    job_id = await dead_job(client, pool)
    before = await read_stream(client, f"/api/jobs/{job_id}/events")
    new = await retry(client, job_id)
    text = await run_to_success(pool, new["id"], 5)
    # The dead job's log is as it ended: the retry appended nothing to it.
    old = await read_stream(client, f"/api/jobs/{job_id}/events")
    assert old.ended and old.events == before.events
    assert one_done_at_the_end(old.events)["status"] == "dead"
    polled = (await client.get(f"/api/jobs/{job_id}/events", params={"after": "0"})).json()
    assert polled["done"] and polled["events"] == old.events
    # The retry's log opens with a `queued` status naming the dead job, and ends succeeded.
    log = await read_stream(client, new["events_url"])
    assert log.ended
    assert (log.events[0]["type"], log.events[0]["status"]) == ("status", "queued")
    assert log.events[0]["retry_of"] == job_id
    done = one_done_at_the_end(log.events)
    assert done["status"] == "succeeded" and reassemble(log.events) == done["result"]["text"]
    assert text == done["result"]["text"]
    # The Python follower reads each log to its one `done`, and stops there by itself.
    assert await followed(client, job_id) == old.events
    assert await followed(client, new["id"]) == log.events


async def test_live_followers_of_a_job_that_dies_end_at_its_done_and_its_retry_never_reopens_it(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    response = await client.post("/api/jobs", json=delayed(5))
    job_id = response.json()["id"]
    connected = [asyncio.Event(), asyncio.Event()]
    live_sse = asyncio.create_task(
        read_stream(client, f"/api/jobs/{job_id}/events", on_event=lambda _: connected[0].set())
    )

    async def live_follower() -> list[dict[str, Any]]:
        seen = []
        async for event in Follower(client, job_id).events():
            seen.append(event)
            connected[1].set()
        return seen

    follower = asyncio.create_task(live_follower())
    for event in connected:  # each has read the `queued` status: it follows the live job
        await signalled(event.wait(), what="a live reader is connected")
    await die(pool, uuid.UUID(job_id), drive.count_tokens(0, 2))
    async with asyncio.timeout(10):
        got: Received = await live_sse
        seen = await follower
    assert got.ended and one_done_at_the_end(got.events)["status"] == "dead"
    assert seen == got.events
    new = await retry(client, job_id)
    # The dead job's log stays complete: a reconnect from its last id gets nothing, ever (the
    # timeout turns a stream that waits for more into a failure, not a hang).
    last = got.events[-1]["seq"]
    async with asyncio.timeout(5):
        again = await read_stream(client, f"/api/jobs/{job_id}/events", last_event_id=str(last))
        assert again.status == 204
        assert await followed(client, job_id, after=last) == []
    polled = await client.get(f"/api/jobs/{job_id}/events", params={"after": last, "wait": 1})
    assert polled.json() == {"events": [], "next_after": last, "status": "dead", "done": True}
    # The job resource is where a follower of the dead job learns of the retry.
    assert (await client.get(f"/api/jobs/{job_id}")).json()["retried_as"] == new["id"]


async def test_a_dead_job_and_its_retry_each_send_one_terminal_webhook(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    # Made by the library: the API refuses a loopback webhook target unless told to allow it.
    body = delayed(5)
    spec = JobSpec(provider="simulated", webhook_url="http://127.0.0.1:9/hook", **body)
    job_id = str((await creates.create(pool, "default", spec, None)).job.id)
    await die(pool, uuid.UUID(job_id), drive.count_tokens(0, 2))
    assert (await client.post(f"/api/jobs/{job_id}/retry")).is_success
    # Whatever job the retry queued runs and succeeds: its webhook is its own.
    held = await drive.claim(pool)
    await drive.succeed(pool, held, "0 1 2 3 4 ")
    rows = await pool.fetch(
        "SELECT job_id, event, url, payload FROM webhook_deliveries ORDER BY id"
    )
    sent = [(str(r["job_id"]), r["event"], r["payload"]["data"]["id"]) for r in rows]
    assert sent == [
        (job_id, "job.dead", job_id),
        (str(held.job_id), "job.succeeded", str(held.job_id)),
    ]
    assert str(held.job_id) != job_id and rows[1]["url"] == rows[0]["url"]
