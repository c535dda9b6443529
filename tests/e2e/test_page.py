"""The browser page, end to end: real Chromium, real server and worker processes, PostgreSQL.

Jobs use the simulated provider's "count" pattern: the i-th token is "{i} ", so the exact final
text proves there was no gap and no duplicate. An init script records every value the output,
status and connection indicator take, so the tests also check what the user saw on the way:
every text shown is a prefix of the final text (a duplicate or a gap would break that).
"""

from __future__ import annotations

import pytest
from playwright.async_api import Page, Route, expect

from tests.e2e.conftest import Stack
from tests.support.job_page import (
    assert_prefixes,
    count_job,
    count_text,
    expect_finished,
    open_page,
    seen,
    submit_form,
    wait_for_tokens,
)

pytestmark = pytest.mark.e2e


async def test_submitted_job_streams_live_and_ends_exact(page: Page, stack: Stack) -> None:
    tokens = 120
    # Held until the page follows live, so a slow machine cannot turn the stream into a
    # snapshot read after the end.
    async with stack.provider_held("simulated"):
        job_id = await submit_form(page, tokens, speed=60)
        await expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live")

    # Tokens appear while the job still runs: streamed, not delivered at the end.
    await page.wait_for_function(
        """() => document.querySelector('[data-testid=output]').textContent.length > 0
                 && document.querySelector('[data-testid=status]').textContent === 'running'"""
    )
    await expect_finished(page, "succeeded", count_text(tokens))
    observed = await seen(page)
    assert_prefixes(observed["outputs"], count_text(tokens))
    assert len(observed["outputs"]) > 3, "the text arrived in one piece, not as a stream"
    assert "live" in observed["connections"]
    # `done` closed the EventSource, so the browser does not reconnect to a finished job.
    await expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "closed")
    # The browser's recent jobs list has it, with its final status.
    recent = page.get_by_test_id("recent-jobs").locator(f"li[data-id='{job_id}'] .pill")
    await expect(recent).to_have_text("succeeded")


async def follow_mid_stream(page: Page, stack: Stack, *, speed: float, shown: int) -> str:
    """Open the view of a 200-token counting job and wait until it shows `shown` tokens;
    returns the job's final text."""
    tokens = 200
    async with stack.provider_held("simulated"):
        job = await stack.create_job(count_job(tokens, tokens_per_second=speed))
        await open_page(page, f"/jobs/{job['id']}")
        await expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live")
    await wait_for_tokens(page, shown)
    return count_text(tokens)


async def test_reload_mid_stream_resumes_without_gap_or_duplicate(page: Page, stack: Stack) -> None:
    expected = await follow_mid_stream(page, stack, speed=50, shown=30)
    before = await seen(page)

    await page.reload()
    await expect_finished(page, "succeeded", expected)
    after = await seen(page)
    assert_prefixes(before["outputs"] + after["outputs"], expected)
    # The snapshot showed the text so far at once: the first text after the reload was not
    # a handful of fresh tokens but at least what the page had before it.
    first_shown = next(value for value in after["outputs"] if value)
    assert len(first_shown) >= len(before["outputs"][-1])


async def test_server_restart_mid_stream_reconnects_by_itself(page: Page, stack: Stack) -> None:
    expected = await follow_mid_stream(page, stack, speed=40, shown=20)

    await stack.kill_server()
    await expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "reconnecting")
    await stack.start_server()

    await expect_finished(page, "succeeded", expected)
    observed = await seen(page)
    assert_prefixes(observed["outputs"], expected)
    states = observed["connections"]
    assert "polling" not in states, f"EventSource should have reconnected itself: {states}"
    assert "live" in states[states.index("reconnecting") :], states


async def test_fault_on_first_attempt_shows_reset_and_retry(page: Page, stack: Stack) -> None:
    tokens = 120
    expected = count_text(tokens)
    fault = {"attempt": 1, "after_tokens": 40, "kind": "transient"}
    # The job starts only once the page follows it live: a page sees a superseded attempt only
    # live. Started at once, attempt 1 (0.67 s) failed in a clean-clone run before the page's
    # scripts had loaded on the busy machine (0.7 s), and the page never showed it.
    async with stack.provider_held("simulated"):
        job = await stack.create_job(count_job(tokens, tokens_per_second=60, faults=[fault]))
        await open_page(page, f"/jobs/{job['id']}")
        await expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live")
    await expect_finished(page, "succeeded", expected)
    observed = await seen(page)
    assert_prefixes(observed["outputs"], expected)
    # Attempt 1's partial text was on screen, then cleared by the reset.
    first_attempt = count_text(40)
    assert first_attempt in observed["outputs"], "attempt 1 did not stream all its text"
    assert "" in observed["outputs"][observed["outputs"].index(first_attempt) :]
    notes = page.get_by_test_id("notes")
    await expect(notes.locator("[data-kind=reset]")).to_contain_text("Attempt 2 started")
    await expect(notes).to_contain_text("Attempt 1 failed: transient")
    await expect(page.get_by_test_id("attempts")).to_have_text("2 of 3")


async def test_permanent_fault_ends_failed_with_its_error_class(page: Page, stack: Stack) -> None:
    # Held until the page follows live: a page opened on a finished job reads the snapshot
    # and never sees the events.
    fault = {"attempt": 1, "after_tokens": 30, "kind": "permanent"}
    async with stack.provider_held("simulated"):
        job = await stack.create_job(count_job(50, tokens_per_second=20, faults=[fault]))
        await open_page(page, f"/jobs/{job['id']}")
        await expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live")

    await expect_finished(page, "failed", count_text(30))
    await expect(page.get_by_test_id("error-class")).to_have_text("permanent")
    # Only the `attempt_error` event says this: a permanent failure has no `status` after it.
    await expect(page.get_by_test_id("notes")).to_contain_text("Attempt 1 failed: permanent")
    await expect(page.get_by_role("button", name="Cancel job")).to_be_hidden()
    await expect(page.get_by_test_id("attempts")).to_have_text("1 of 3")


async def test_without_event_source_the_page_polls_to_the_exact_end(
    page: Page, stack: Stack
) -> None:
    tokens = 100
    expected = count_text(tokens)
    await page.add_init_script("delete window.EventSource")
    # Held until the page polls: on a job already finished it would read the snapshot only.
    async with stack.provider_held("simulated"):
        job = await stack.create_job(count_job(tokens, tokens_per_second=60))
        await open_page(page, f"/jobs/{job['id']}")
        await expect(page.get_by_test_id("notes")).to_contain_text("has no EventSource")
    await expect_finished(page, "succeeded", expected)
    observed = await seen(page)
    assert_prefixes(observed["outputs"], expected)
    assert "polling" in observed["connections"]
    assert "live" not in observed["connections"]


async def test_refused_stream_falls_back_to_polling(page: Page, stack: Stack) -> None:
    tokens = 80
    expected = count_text(tokens)

    async def refuse_streams(route: Route) -> None:
        # A proxy that will not pass text/event-stream: EventSource gets a 502, which it
        # never retries. The long-poll requests (Accept: application/json) go through.
        if "text/event-stream" in (route.request.headers.get("accept") or ""):
            await route.fulfill(status=502, body="stream refused")
        else:
            await route.continue_()

    await page.route("**/api/jobs/*/events*", refuse_streams)
    # Held until the page has fallen back: a clean-clone CI run opened the page after the
    # job (1.3 s) had finished, so the page read the snapshot and never asked for a stream.
    async with stack.provider_held("simulated"):
        job = await stack.create_job(count_job(tokens, tokens_per_second=60))
        await open_page(page, f"/jobs/{job['id']}")
        await expect(page.get_by_test_id("notes")).to_contain_text("stream was refused")
    await expect_finished(page, "succeeded", expected)
    assert_prefixes((await seen(page))["outputs"], expected)


async def test_snapshot_unreachable_at_first_is_retried_until_it_loads(
    page: Page, stack: Stack
) -> None:
    tokens = 60
    expected = count_text(tokens)
    job = await stack.create_job(count_job(tokens, tokens_per_second=60))
    refused = 0

    async def unreachable_twice(route: Route) -> None:
        # A server restarting under a reloaded page: the first snapshot requests fail.
        nonlocal refused
        if refused < 2:
            refused += 1
            await route.abort("connectionrefused")
        else:
            await route.continue_()

    await page.route(f"**/api/jobs/{job['id']}", unreachable_twice)
    await open_page(page, f"/jobs/{job['id']}")

    await expect_finished(page, "succeeded", expected)
    assert refused == 2
    assert "unreachable" in (await seen(page))["connections"]
    await expect(page.locator("#job-missing")).to_be_hidden()
