"""The browser page, end to end: real Chromium, real server and worker processes, PostgreSQL.

Jobs use the simulated provider's "count" pattern: the i-th token is "{i} ", so the exact final
text proves there was no gap and no duplicate. An init script records every value the output,
status and connection indicator take, so the tests also check what the user saw on the way:
every text shown is a prefix of the final text (a duplicate or a gap would break that).
"""

from __future__ import annotations

import re
import shutil
import uuid
from pathlib import Path
from typing import Any, TypedDict

import asyncpg
import pytest
from playwright.async_api import Page, Route, expect

from tests.e2e.conftest import OUTPUT_DIR, Stack
from tests.support.dead_jobs import delayed, die
from worker.providers.simulated import expected_text

pytestmark = pytest.mark.e2e

FINISH_TIMEOUT_MS = 30_000

WATCH_SCRIPT = """
window.__seen = { outputs: [], statuses: [], connections: [] };
const push = (list, value) => { if (list[list.length - 1] !== value) list.push(value); };
document.addEventListener("readystatechange", () => {
  if (document.readyState !== "interactive") return;
  const watch = (testid, list, read, options) => {
    const el = document.querySelector(`[data-testid="${testid}"]`);
    new MutationObserver(() => push(list, read(el))).observe(el, options);
  };
  const text = { characterData: true, childList: true, subtree: true };
  watch("output", window.__seen.outputs, (el) => el.textContent, text);
  watch("status", window.__seen.statuses, (el) => el.textContent, text);
  watch("connection", window.__seen.connections, (el) => el.dataset.state,
        { attributes: true, attributeFilter: ["data-state"] });
});
"""


class Seen(TypedDict):
    outputs: list[str]
    statuses: list[str]
    connections: list[str]


def count_text(tokens: int) -> str:
    return "".join(f"{i} " for i in range(tokens))


def count_job(tokens: int, tokens_per_second: float, **simulate: Any) -> dict[str, Any]:
    return {
        "prompt": "count for the browser",
        "max_tokens": tokens,
        "simulate": {
            "pattern": "count",
            "tokens": tokens,
            "tokens_per_second": tokens_per_second,
            "first_token_delay_s": 0,
            **simulate,
        },
    }


async def open_page(page: Page, path: str) -> None:
    await page.add_init_script(WATCH_SCRIPT)
    await page.goto(path)


async def seen(page: Page) -> Seen:
    value: Seen = await page.evaluate("window.__seen")
    return value


async def wait_for_tokens(page: Page, tokens: int) -> None:
    """Until the output shows at least `tokens` tokens of the count pattern."""
    await page.wait_for_function(
        "n => document.querySelector('[data-testid=output]').textContent.length >= n",
        arg=len(count_text(tokens)),
    )


async def expect_finished(page: Page, status: str, text: str | None = None) -> None:
    await expect(page.get_by_test_id("status")).to_have_text(status, timeout=FINISH_TIMEOUT_MS)
    if text is not None:
        assert await page.get_by_test_id("output").text_content() == text
    # The page swaps in result.text (and says so) only if its own reassembly went wrong.
    await expect(page.locator("[data-kind=mismatch]")).to_have_count(0)


def assert_prefixes(outputs: list[str], expected: str) -> None:
    wrong = [value[-60:] for value in outputs if not expected.startswith(value)]
    assert not wrong, f"the page showed text that is not a prefix of the final text: {wrong}"


async def submit_form(page: Page, tokens: int, speed: float, *, pattern: str = "count") -> str:
    """Fill the form, start the job; the job's id once its view is open."""
    await open_page(page, "/")
    await page.get_by_label("Prompt").fill("Why do leases make background jobs safe?")
    await page.get_by_label("Max tokens", exact=True).fill(str(tokens))
    await page.get_by_label("Speed").fill(str(speed))
    await page.get_by_label("Tokens (blank = max tokens)").fill(str(tokens))
    await page.get_by_label("Pattern").select_option(pattern)
    await page.get_by_role("button", name="Start job").click()
    await page.wait_for_url("**/jobs/*")
    return page.url.rsplit("/", 1)[-1]


async def test_submitted_job_streams_live_and_ends_exact(page: Page) -> None:
    tokens = 120
    job_id = await submit_form(page, tokens, speed=60)

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


async def test_reload_mid_stream_resumes_without_gap_or_duplicate(page: Page, stack: Stack) -> None:
    tokens = 200
    expected = count_text(tokens)
    job = await stack.create_job(count_job(tokens, tokens_per_second=50))
    await open_page(page, f"/jobs/{job['id']}")
    await wait_for_tokens(page, 30)
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
    tokens = 200
    expected = count_text(tokens)
    job = await stack.create_job(count_job(tokens, tokens_per_second=40))
    await open_page(page, f"/jobs/{job['id']}")
    await wait_for_tokens(page, 20)

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
    job = await stack.create_job(count_job(tokens, tokens_per_second=60, faults=[fault]))
    await open_page(page, f"/jobs/{job['id']}")

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
    # Slow enough that the page is following live when the attempt fails (about 1.5 s in):
    # a page opened on a finished job reads the snapshot and never sees the events.
    fault = {"attempt": 1, "after_tokens": 30, "kind": "permanent"}
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
    job = await stack.create_job(count_job(tokens, tokens_per_second=60))
    await page.add_init_script("delete window.EventSource")
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
    job = await stack.create_job(count_job(tokens, tokens_per_second=60))

    async def refuse_streams(route: Route) -> None:
        # A proxy that will not pass text/event-stream: EventSource gets a 502, which it
        # never retries. The long-poll requests (Accept: application/json) go through.
        if "text/event-stream" in (route.request.headers.get("accept") or ""):
            await route.fulfill(status=502, body="stream refused")
        else:
            await route.continue_()

    await page.route("**/api/jobs/*/events*", refuse_streams)
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


async def test_cancel_running_job_ends_cancelled(page: Page, stack: Stack) -> None:
    job = await stack.create_job(count_job(5000, tokens_per_second=25))
    await open_page(page, f"/jobs/{job['id']}")
    await wait_for_tokens(page, 5)

    cancel = page.get_by_role("button", name="Cancel job")
    await cancel.click()
    await expect_finished(page, "cancelled")
    await expect(cancel).to_be_hidden()
    statuses = (await seen(page))["statuses"]
    assert statuses[-1] == "cancelled"
    assert "running" in statuses
    assert_prefixes((await seen(page))["outputs"], count_text(5000))


async def test_a_delayed_job_says_when_it_starts(page: Page) -> None:
    await open_page(page, "/")
    await page.get_by_label("Prompt").fill("later, please")
    await page.get_by_label("Delay start (s, blank = now)").fill("3600")
    await page.get_by_role("button", name="Start job").click()
    await page.wait_for_url("**/jobs/*")
    await expect(page.get_by_test_id("status")).to_have_text("queued")
    await expect(page.locator("#output-placeholder")).to_contain_text("Scheduled to start at")


async def test_a_dead_job_links_to_its_retry_and_the_retry_back(
    page: Page, stack: Stack, pool: asyncpg.Pool
) -> None:
    # Regression (issue 9, defect 4): a retry appended to the dead job's log after its `done`,
    # which the page had closed on. A retry is a new job: the page links the two.
    job = await stack.create_job(delayed(30))
    await die(pool, uuid.UUID(job["id"]), ["0 1 "])
    retry = (await stack.http.post(f"/api/jobs/{job['id']}/retry")).json()
    await open_page(page, f"/jobs/{job['id']}")
    await expect(page.get_by_test_id("status")).to_have_text("dead")
    await expect(page.get_by_test_id("error-class")).to_have_text("transient")
    lineage = page.get_by_test_id("lineage")
    await expect(lineage).to_have_text(f"Retried as job {retry['id'][:8]}.")
    await lineage.get_by_role("link").click()
    await page.wait_for_url(f"**/jobs/{retry['id']}")
    await expect_finished(page, "succeeded", count_text(30))
    await expect(lineage).to_have_text(f"A retry of job {job['id'][:8]}.")


async def test_a_job_of_messages_shows_its_last_user_message_as_the_prompt(
    page: Page, stack: Stack
) -> None:
    job = await stack.create_job({
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": [{"type": "text", "text": "the last question"}]},
        ],
        "simulate": {"tokens": 3, "tokens_per_second": 0, "first_token_delay_s": 0},
    })  # fmt: skip
    await open_page(page, f"/jobs/{job['id']}")  # made by the API: in no recent list
    # The simulated text is drawn from the prompt it was given: the last user message.
    await expect_finished(page, "succeeded", expected_text("the last question", 3))
    await expect(page.locator("#job-prompt")).to_have_text("the last question")


async def test_finished_job_view_screenshot(page: Page, output_dir: Path) -> None:
    """The job view after a retried job: what the README shows."""
    await page.set_viewport_size({"width": 1180, "height": 860})
    await open_page(page, "/")
    await page.get_by_label("Prompt").fill(
        "Explain how a lease keeps a background job from running twice, in one paragraph."
    )
    await page.get_by_label("Speed").fill("120")
    await page.get_by_label("Tokens (blank = max tokens)").fill("90")
    await page.get_by_label("Fault").select_option("transient")
    await page.get_by_label("after").fill("25")
    await page.get_by_role("button", name="Start job").click()
    await page.wait_for_url("**/jobs/*")

    await expect_finished(page, "succeeded")
    await expect(page.get_by_test_id("attempt-history").locator("tbody tr")).to_have_count(2)
    await expect(page.get_by_test_id("cost")).to_have_text(re.compile(r"\$\d"))
    shot = output_dir / "job-view.png"
    await page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    shutil.copyfile(shot, OUTPUT_DIR / "job-view.png")


async def test_an_unknown_job_says_so_and_waits_for_nothing(page: Page) -> None:
    # Regression (issue 13): "no job" and "Waiting for the first token..." were shown together.
    await open_page(page, f"/jobs/{uuid.uuid4()}")
    await expect(page.locator("#job-missing")).to_have_text(
        re.compile("There is no job with this id")
    )
    await expect(page.get_by_test_id("status")).to_have_text("not found")
    for hidden in ("#output-placeholder", "[data-testid=output]", "#facts", "#cancel"):
        await expect(page.locator(hidden)).to_be_hidden()
    await expect(page.get_by_role("link", name="New job")).to_be_visible()


async def test_on_a_phone_recent_jobs_are_one_tap_away_and_attempts_read_whole(
    page: Page, stack: Stack, output_dir: Path
) -> None:
    # Regression (issue 13): at 390 px the recent list was ~1,400 px down and the attempts
    # table hid Cost and Took past its right edge.
    await page.set_viewport_size({"width": 390, "height": 844})
    made_here = await submit_form(page, 8, 0)  # so the recent list holds a job
    await expect_finished(page, "succeeded")
    retried = count_job(8, 0, faults=[{"attempt": 1, "after_tokens": 3, "kind": "transient"}])
    job = await stack.create_job(retried)
    await page.goto(f"/jobs/{job['id']}")
    await expect_finished(page, "succeeded", count_text(8))
    rows = page.get_by_test_id("attempt-history").locator("tbody tr")
    await expect(rows).to_have_count(2)
    # Every cell of a row, Cost and Took included, inside the screen's width, and labelled.
    # (Waited for: the table is re-rendered as the job's details arrive.)
    await page.wait_for_function(
        """() => {
          const cells = [...document.querySelectorAll(
            "[data-testid=attempt-history] tbody tr:first-child td")];
          return cells.length === 6 && cells.every((td) => {
            const r = td.getBoundingClientRect();
            return td.dataset.label && r.width > 0 && r.left >= 0 && r.right <= innerWidth;
          });
        }""",
        timeout=5000,
    )
    overflow = await page.evaluate("document.documentElement.scrollWidth")
    assert overflow <= 390
    await page.screenshot(path=str(output_dir / "phone-job-view.png"), full_page=True)
    # The recent list: one tap from the top of the page, the job made in this browser in it.
    await page.evaluate("window.scrollTo(0, 0)")
    await page.get_by_test_id("to-recent").click()
    recent = page.get_by_test_id("recent-jobs")
    await expect(recent.locator(f"a[href='/jobs/{made_here}']")).to_be_in_viewport()
