"""The chat example (examples/chat/, built by `make chat`) in real Chromium: @ai-sdk/react's
useChat with `resume: true`, unchanged, on a live server and worker. It streams; a reload
mid-answer resumes to the exact text; a worker killed mid-answer, and another started, still
ends with the exact text; Stop cancels the job (docs/chat.md)."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import pytest
from playwright.async_api import Browser, Locator, Page, expect

from tests.e2e.conftest import OUTPUT_DIR, Stack
from tests.support import chat_node, database
from tests.support.polling import eventually
from tests.support.processes import processes

pytestmark = pytest.mark.e2e

# Three seconds of answer: a worker's death lands in the middle of it.
PACED = {"tokens": 60, "tokens_per_second": 20, "first_token_delay_s": 0}
# Six: a reload of the page (its bundle parsed again) is over long before the answer, even on a
# busy machine.
LONG = {**PACED, "tokens": 120}
ENDED = ("succeeded", "failed", "dead", "cancelled")
# How long the page may take to show what it is waited for, on a busy machine: an answer's end
# after a reload or a worker's death, the page's start (expect's own is 5 s).
END_MS = 30_000


@pytest.fixture(scope="module")
async def chat_stack(admin_url: str, template_ready: None) -> AsyncIterator[Stack]:
    chat_node.require_installed(page=True)
    url = await database.create_test_database(admin_url)
    logs = OUTPUT_DIR / "e2e" / "test_chat_page"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    try:
        with processes(logs) as group:
            stack = Stack(group, url)
            # Short leases: a killed worker's attempt is reaped two seconds after its death.
            stack.env |= {"JOBSTREAM_CHAT_PAGE_DIR": str(chat_node.PAGE_DIR),
                          "JOBSTREAM_LEASE_S": "2"}  # fmt: skip
            try:
                await stack.start()
                yield stack
            finally:
                await stack.aclose()
    finally:
        await database.drop_test_database(admin_url, url)


@pytest.fixture
async def page(browser: Browser, chat_stack: Stack) -> AsyncIterator[Page]:
    context = await browser.new_context(base_url=chat_stack.base_url)
    context.set_default_timeout(20_000)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield page
    finally:
        await context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


async def open_chat(page: Page, simulate: dict[str, Any]) -> str:
    chat = f"chat-{uuid.uuid4().hex[:8]}"
    body = quote(json.dumps({"simulate": simulate}))
    await page.goto(f"/chat/?chat={chat}&body={body}")
    await expect(page.get_by_test_id("status")).to_have_attribute(
        "data-status", "ready", timeout=END_MS
    )
    return chat


async def ask(page: Page, text: str) -> Locator:
    """Send `text`; the answer's message, once its first words are there."""
    await page.get_by_test_id("prompt").fill(text)
    await page.get_by_test_id("send").click()
    answer = page.locator("[data-testid=message][data-role=assistant]")
    await expect(answer.get_by_test_id("text")).not_to_have_text("", timeout=END_MS)
    return answer


async def job(stack: Stack, job_id: str) -> dict[str, Any]:
    found: dict[str, Any] = (await stack.http.get(f"/api/jobs/{job_id}")).json()
    return found


async def ended(stack: Stack, job_id: str) -> dict[str, Any]:
    return await eventually(
        lambda: job(stack, job_id), lambda j: j["status"] in ENDED,
        what=f"job {job_id} ended", timeout_s=30,
    )  # fmt: skip


async def test_a_reload_mid_answer_resumes_to_the_exact_text(page: Page, chat_stack: Stack) -> None:
    await open_chat(page, LONG)
    answer = await ask(page, "Explain leases")
    job_id = await answer.get_attribute("data-id")
    assert job_id is not None
    assert (await job(chat_stack, job_id))["status"] == "running"
    await page.reload()
    # The messages came back from localStorage; useChat resumed the answer from its start.
    asked = page.locator("[data-testid=message][data-role=user] [data-testid=text]")
    await expect(asked).to_have_text(["Explain leases"], timeout=END_MS)
    await expect(page.get_by_test_id("status")).to_have_attribute(
        "data-status", "streaming", timeout=END_MS
    )
    answer = page.locator(f"[data-testid=message][data-id='{job_id}']")
    await expect(answer.get_by_test_id("meta")).to_contain_text("succeeded", timeout=END_MS)
    done = await ended(chat_stack, job_id)
    await expect(answer.get_by_test_id("text")).to_have_text(done["result"]["text"])
    await expect(page.locator("[data-testid=message][data-role=assistant]")).to_have_count(1)
    await expect(page.get_by_test_id("status")).to_have_attribute("data-status", "ready")


async def test_a_worker_killed_mid_answer_still_ends_with_the_exact_text(
    page: Page, chat_stack: Stack
) -> None:
    await open_chat(page, PACED)
    answer = await ask(page, "Explain crashes")
    job_id = await answer.get_attribute("data-id")
    assert job_id is not None
    await chat_stack.kill_worker()
    chat_stack.start_worker(f"worker-{job_id[:8]}")
    # The first attempt's text was cut off at its end: the page reconnects, and the replay
    # holds the second attempt's text alone.
    await expect(answer.get_by_test_id("meta")).to_contain_text("succeeded", timeout=END_MS)
    done = await ended(chat_stack, job_id)
    assert done["status"] == "succeeded" and done["attempts"] >= 2  # more, if a lease lapsed
    await expect(answer.get_by_test_id("text")).to_have_text(done["result"]["text"])
    await expect(page.locator("[data-testid=message][data-role=assistant]")).to_have_count(1)
    await expect(page.get_by_test_id("error")).to_have_count(0)


async def test_stop_cancels_the_job(page: Page, chat_stack: Stack) -> None:
    await open_chat(page, {**PACED, "tokens": 400})
    answer = await ask(page, "Explain stopping")
    job_id = await answer.get_attribute("data-id")
    assert job_id is not None
    await page.get_by_test_id("stop").click()
    await expect(page.get_by_test_id("send")).to_be_visible(timeout=END_MS)
    assert (await ended(chat_stack, job_id))["status"] == "cancelled"
    # The page hung up: it hears of the cancel from the job itself.
    await expect(answer.get_by_test_id("meta")).to_contain_text("cancelled", timeout=END_MS)
