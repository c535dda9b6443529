"""A reader whose cursor falls inside a compacted range: the page (Chromium) and the CLI get
`resync`, recover through the snapshot and end with the exact text. Real server and worker
processes; the worker's janitor compacts a job as soon as it ends.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import orjson
import pytest
from playwright.async_api import Page, Response, expect

from tests.e2e.conftest import Stack
from tests.e2e.test_cli import cli, simulate
from tests.support.job_page import (
    assert_prefixes,
    count_job,
    count_text,
    expect_finished,
    open_page,
    seen,
    wait_for_tokens,
)
from tests.support.polling import eventually
from tests.support.processes import Processes

pytestmark = pytest.mark.e2e


@pytest.fixture
async def stack(process_group: Processes, database_url: str) -> AsyncIterator[Stack]:
    """The conftest's stack, with a janitor that compacts a job at once when it ends."""
    stack = Stack(process_group, database_url)
    stack.env.update({"JOBSTREAM_COMPACT_AFTER_S": "0", "JOBSTREAM_JANITOR_INTERVAL_S": "0.1"})
    try:
        await stack.start()
        yield stack
    finally:
        await stack.aclose()


async def compacted(pool: asyncpg.Pool, job_id: str) -> asyncpg.Record:
    """Once the job has ended and the janitor compacted it: a folded range of its log."""

    async def ranges() -> list[asyncpg.Record]:
        return await pool.fetch(
            "SELECT e.seq, (e.data->>'from_seq')::bigint AS from_seq"
            "  FROM jobs j JOIN job_events e ON e.job_id = j.id"
            " WHERE j.id = $1 AND j.expires_at IS NOT NULL AND e.data ? 'from_seq'",
            uuid.UUID(job_id),
        )

    found = await eventually(ranges, bool, what="the janitor compacts the job", timeout_s=30)
    folded: asyncpg.Record = found[-1]
    assert folded["from_seq"] < folded["seq"]
    return folded


async def test_the_page_inside_a_compacted_range_resyncs_to_the_exact_text(
    page: Page, stack: Stack, pool: asyncpg.Pool
) -> None:
    tokens = 150
    expected = count_text(tokens)
    # Held until the page follows live: opened on a finished job, it would never reconnect.
    async with stack.provider_held("simulated"):
        job = await stack.create_job(count_job(tokens, tokens_per_second=50))
        await open_page(page, f"/jobs/{job['id']}")
        await expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live")
    await wait_for_tokens(page, 20)
    # The page loses the server mid-stream; meanwhile the job ends and its log is compacted,
    # so the cursor the page reconnects with is inside the folded range.
    await stack.kill_server()
    await expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "reconnecting")
    await compacted(pool, job["id"])
    # Counted from the restart on: before it, the page may also have read the job for its
    # details (a `status` event it saw live, when it opened before the job started, asks for one).
    snapshots: list[str] = []

    def record(response: Response) -> None:
        if response.url.endswith(f"/api/jobs/{job['id']}"):
            snapshots.append(response.url)

    page.on("response", record)
    await stack.start_server()

    await expect_finished(page, "succeeded", expected)
    # The follower is done (it closes after the snapshot it reloaded): no read is still to come.
    await expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "closed")
    assert len(snapshots) == 1, "the page did not reload the snapshot once on `resync`"
    assert_prefixes((await seen(page))["outputs"], expected)


async def test_the_cli_inside_a_compacted_range_resyncs_to_the_exact_text(
    stack: Stack, pool: asyncpg.Pool
) -> None:
    job: dict[str, Any] = await stack.create_job(
        {"prompt": "count", "simulate": orjson.loads(simulate(60, tokens_per_second=150))}
    )
    folded = await compacted(pool, job["id"])
    inside = str(folded["from_seq"])

    code, out, err = await cli(stack, "follow", job["id"], "--after", inside)
    assert code == 0, err
    assert out == count_text(60) + "\n"
    code, out, _ = await cli(stack, "follow", job["id"], "--after", inside, "--json")
    first = orjson.loads(out.splitlines()[0])
    assert (first["type"], first["first_seq"]) == ("resync", folded["seq"] + 1)
    # From the start, the compacted log reads as the result, without a resync.
    code, out, _ = await cli(stack, "follow", job["id"], "--json")
    events = [orjson.loads(line) for line in out.splitlines()]
    assert code == 0 and "resync" not in {e["type"] for e in events}
    assert "".join(e["text"] for e in events if e["type"] == "token") == count_text(60)
