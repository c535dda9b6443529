"""The browser page, end to end, on jobs in every state but a live stream: cancelling a running
job, a delayed job, a dead job and its retry, a job of messages, the finished view, an unknown
job, and the page on a phone. Streaming, faults and fallbacks: test_page.py."""

from __future__ import annotations

import re
import shutil
import uuid
from pathlib import Path

import asyncpg
import pytest
from playwright.async_api import Page, expect

from tests.e2e.conftest import OUTPUT_DIR, Stack
from tests.support.dead_jobs import delayed, die
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
from tests.support.simulated_text import expected_text

pytestmark = pytest.mark.e2e


async def test_cancel_running_job_ends_cancelled(page: Page, stack: Stack) -> None:
    job = await stack.create_job(count_job(5000, tokens_per_second=100))
    await open_page(page, f"/jobs/{job['id']}")
    await wait_for_tokens(page, 5)

    # The button stays put while the text grows by lines: below the output it moved under the
    # pointer, and a click could land on the text instead (a CI run waited 30 s for a cancel).
    cancel = page.get_by_role("button", name="Cancel job")
    before = await cancel.bounding_box()
    await wait_for_tokens(page, 300)
    assert await cancel.bounding_box() == before
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
    await expect(lineage).to_have_text(f"Retried as job {retry['id'][-8:]}.")
    await lineage.get_by_role("link").click()
    await page.wait_for_url(f"**/jobs/{retry['id']}")
    await expect_finished(page, "succeeded", count_text(30))
    await expect(lineage).to_have_text(f"A retry of job {job['id'][-8:]}.")


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
