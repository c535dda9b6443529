"""The page with jobs of the app's own, end to end: real Chromium, and server and worker
processes started with `JOBSTREAM_APP=tests.support.page_jobs:app`.

The job picker and the form built from a job's input schema, a 422 shown at its field, the
progress bar, the structured output card, a reload mid-stream, and the page on a phone. The
`steps` job's text is the count pattern's, once a step, so its exact final text is known.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Locator, Page, expect

from tests.e2e.conftest import OUTPUT_DIR, Stack, running_stack
from tests.support.job_page import (
    PROGRESS_SCRIPT,
    assert_prefixes,
    count_text,
    expect_finished,
    open_page,
    seen,
    wait_for_tokens,
)
from tests.support.page_jobs import STEP_TOKENS
from tests.support.processes import Processes

pytestmark = pytest.mark.e2e

APP = "tests.support.page_jobs:app"


DOCUMENT = "Leases renew while a worker lives. A lease that lapses frees the job, and a lease ends."


@pytest.fixture
async def stack(process_group: Processes, database_url: str) -> AsyncIterator[Stack]:
    """conftest's stack, with the test app's jobs: the `page` fixture opens this one."""
    async with running_stack(process_group, database_url, app=APP) as started:
        yield started


def steps_text(steps: int) -> str:
    return count_text(STEP_TOKENS) * steps


async def progress_states(page: Page) -> list[Any]:
    states: list[Any] = await page.evaluate("window.__progress")
    return states


async def get_job(stack: Stack, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = (await stack.http.get(f"/api/jobs/{job_id}")).json()
    return job


async def choose(page: Page, name: str) -> None:
    await open_page(page, "/")
    await page.get_by_role("combobox", name="Job", exact=True).select_option(name)


async def fill_review(page: Page, title: str = "Leases") -> None:
    await choose(page, "review")
    await page.get_by_label("Title").fill(title)
    await page.get_by_label("Document").fill(DOCUMENT)
    await page.get_by_label("Notes").fill("For the operators' handbook.")
    await page.get_by_label("Key words").fill("2")
    await page.get_by_label("Strict").check()
    await page.get_by_label("Tone").select_option(label="formal")


async def start(page: Page) -> str:
    await page.get_by_role("button", name="Start job").click()
    await page.wait_for_url("**/jobs/*")
    return page.url.rsplit("/", 1)[-1]


async def test_picker_lists_the_apps_jobs_and_builds_each_form(
    page: Page, stack: Stack, output_dir: Path
) -> None:
    job_types = (await stack.http.get("/api/job-types")).json()["jobs"]
    await open_page(page, "/")
    picker = page.get_by_role("combobox", name="Job", exact=True)
    await expect(picker.locator("option")).to_have_text([job["name"] for job in job_types])
    await expect(picker).to_have_value("llm")
    await expect(page.get_by_label("Prompt")).to_be_visible()

    await picker.select_option("review")
    await expect(page.get_by_label("Prompt")).to_be_hidden()
    await expect(page.locator("#simulate")).to_be_hidden()
    await expect(page.locator("#job-description")).to_have_text(
        "Reviews a document: a sentence of text, and the review as structured output."
    )
    title = page.get_by_label("Title")
    await expect(title).to_have_attribute("type", "text")
    await expect(title).to_have_attribute("maxlength", "80")
    await expect(title).to_have_accessible_description("What the document is called.")
    document = page.get_by_label("Document")
    assert await document.evaluate("el => el.tagName") == "TEXTAREA"  # maxLength 20,000
    notes = page.get_by_label("Notes")
    assert await notes.evaluate("el => el.tagName") == "TEXTAREA"  # "format": "textarea"
    keywords = page.get_by_label("Key words")
    await expect(keywords).to_have_attribute("type", "number")
    await expect(keywords).to_have_attribute("min", "1")
    await expect(keywords).to_have_attribute("max", "10")
    await expect(keywords).to_have_value("3")
    strict = page.get_by_label("Strict")
    await expect(strict).to_have_attribute("type", "checkbox")
    await expect(strict).not_to_be_checked()
    await expect(strict).to_have_accessible_description("Count every word, short ones too.")
    tone = page.get_by_label("Tone")
    await expect(tone.locator("option")).to_have_text(["plain", "formal", "playful"])
    await expect(tone.locator("option:checked")).to_have_text("plain")
    # Required: the attribute, and a mark on the label; optional fields have neither.
    for required in (title, document):
        await expect(required).to_have_attribute("required", "")
    for optional in (notes, keywords, tone):
        await expect(optional).not_to_have_attribute("required", "")
    marked = page.locator("#job-input-fields label:has(.required)")
    await expect(marked).to_have_text(["Title *", "Document *"])
    # A job's own default for max attempts.
    await expect(page.get_by_label("Max attempts")).to_have_value("3")
    await page.screenshot(path=str(output_dir / "review-form.png"), full_page=True)

    await picker.select_option("steps")
    await expect(page.get_by_label("Steps", exact=True)).to_have_value("3")
    await expect(page.get_by_label("Title")).to_have_count(0)

    await picker.select_option("llm")
    await expect(page.get_by_label("Prompt")).to_be_visible()
    await expect(page.locator("#simulate")).to_be_visible()
    await expect(page.get_by_test_id("job-input-fields")).to_be_hidden()


async def test_named_job_streams_its_text_and_progress_to_the_end(page: Page, stack: Stack) -> None:
    await page.add_init_script(PROGRESS_SCRIPT)
    # Held until the page follows live: every progress event reaches it as it happens.
    async with stack.provider_held("simulated"):
        await choose(page, "steps")
        await page.get_by_label("Tokens Per Second").fill("30")
        job_id = await start(page)
        await expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live")

    expected = steps_text(3)
    await expect_finished(page, "succeeded", expected)
    assert (await get_job(stack, job_id))["result"]["text"] == expected
    observed = await seen(page)
    assert_prefixes(observed["outputs"], expected)
    assert len(observed["outputs"]) > 3, "the text arrived in one piece, not as a stream"

    shown = [state for state in await progress_states(page) if state is not None]
    values = [value for value, _ in shown]
    assert values == sorted(values), f"the bar went back: {shown}"
    assert any(0 < value < 1 for value in values), f"no step between start and end: {shown}"
    assert shown[-1] == [1, "100% · done"]
    # At the end the bar stays, full, with the job's last message.
    bar = page.get_by_role("progressbar", name="Progress")
    await expect(bar).to_be_visible()
    await expect(bar).to_have_js_property("value", 1)
    await expect(bar).to_have_accessible_description("100% · done")
    # A named job's header: its name and input, not a prompt.
    await expect(page.get_by_test_id("job-name")).to_have_text("steps")
    await expect(page.get_by_test_id("job-input")).to_contain_text("Tokens Per Second")
    await expect(page.locator("#job-prompt")).to_be_hidden()
    await expect(page.locator("#result-card")).to_be_hidden()  # no output model


async def test_a_retry_clears_the_progress_bar(page: Page, stack: Stack) -> None:
    await page.add_init_script(PROGRESS_SCRIPT)
    async with stack.provider_held("simulated"):
        job = await stack.create_job({"job": "retried", "input": {}})
        await open_page(page, f"/jobs/{job['id']}")
        await expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live")
    await expect_finished(page, "succeeded", "attempt 2 ")
    states = await progress_states(page)
    while states and states[0] is None:  # hidden from the start
        states.pop(0)
    # Attempt 1's half, gone with its reset; attempt 2's from nothing to the end.
    assert states == [[0.5, "50% · attempt 1"], None, [0.5, "50% · attempt 2"], [1, "100% · done"]]
    await expect(page.get_by_test_id("notes").locator("[data-kind=reset]")).to_contain_text(
        "Attempt 2 started"
    )


async def test_structured_output_shows_as_a_card_beside_the_text(
    page: Page, stack: Stack, output_dir: Path
) -> None:
    await page.set_viewport_size({"width": 1180, "height": 860})
    await page.add_init_script(PROGRESS_SCRIPT)
    async with stack.provider_held("simulated"):
        await fill_review(page)
        job_id = await start(page)
        await expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live")
    await expect_finished(page, "succeeded")
    job = await get_job(stack, job_id)
    output = job["result"]["output"]
    await expect_output_card(page, job)
    # From the `done` event, live; the progress bar kept its last value.
    await expect(page.get_by_test_id("progress-text")).to_have_text("100% · done")
    shot = output_dir / "structured-output.png"
    await page.screenshot(path=str(shot), full_page=True)
    shutil.copyfile(shot, OUTPUT_DIR / "page-structured-output.png")

    # The same from the job resource, after a reload.
    await page.reload()
    await expect_finished(page, "succeeded", job["result"]["text"])
    await expect_output_card(page, job)
    assert output["keywords"], "the review found no key words: the card shows too little"


async def expect_output_card(page: Page, job: dict[str, Any]) -> None:
    output = job["result"]["output"]
    text = page.get_by_test_id("output")
    await expect(text).to_have_text(job["result"]["text"])
    await expect(text).to_be_visible()
    card = page.get_by_test_id("result-output")
    await expect(card).to_be_visible()
    await expect(card.locator(":scope > dl > dt")).to_have_text(
        ["Title", "Tone", "Strict", "Stats", "Keywords", "Tags", "Notes"]
    )

    def field(key: str) -> Locator:
        return card.locator(f":scope > dl > dd[data-key={key}]")

    await expect(field("title")).to_have_text("Leases")
    await expect(field("tone")).to_have_text("formal")
    await expect(field("strict")).to_have_text("yes")
    await expect(field("notes")).to_have_text("For the operators' handbook.")
    stats = field("stats").locator("dl")
    await expect(stats.locator("dt")).to_have_text(["Words", "Longest Word"])
    await expect(stats.locator("dd")).to_have_text(
        [str(output["stats"]["words"]), output["stats"]["longest_word"]]
    )
    records = field("keywords").locator("ol > li")
    await expect(records).to_have_count(len(output["keywords"]))
    first = output["keywords"][0]
    await expect(records.first.locator("dd")).to_have_text([first["word"], str(first["count"])])
    await expect(field("tags").locator("li")).to_have_text(output["tags"])
    assert "{" not in (await card.text_content() or ""), "raw JSON in the card"
    # The header: the job's name and input.
    await expect(page.get_by_test_id("job-name")).to_have_text("review")
    header = page.get_by_test_id("job-input")
    await expect(header.locator("dd[data-key=title]")).to_have_text("Leases")
    await expect(header.locator("dd[data-key=tone]")).to_have_text("formal")


async def test_a_refused_input_field_shows_its_error_next_to_it(page: Page, stack: Stack) -> None:
    await fill_review(page, title="SHOUTED TITLE")  # a rule only the server knows
    await page.get_by_role("button", name="Start job").click()
    error = page.locator("#error-input-title")
    await expect(error).to_contain_text("must not be all capitals")
    title = page.get_by_label("Title")
    await expect(title).to_have_attribute("aria-invalid", "true")
    # Next to its field, and named in the summary as the form names it.
    await expect(page.locator(".field", has=title).locator(".field-error")).to_have_count(1)
    await expect(title).to_have_accessible_description(
        "What the document is called. Value error, must not be all capitals"
    )
    await expect(page.locator("#form-error")).to_contain_text("Title: Value error")
    assert page.url.endswith("/")

    await title.fill("Leases")
    job_id = await start(page)
    await expect_finished(page, "succeeded")
    assert (await get_job(stack, job_id))["input"]["title"] == "Leases"


async def test_reload_mid_stream_of_a_named_job_resumes_exactly(page: Page, stack: Stack) -> None:
    body = {"job": "steps", "input": {"steps": 3, "tokens_per_second": 20}}
    async with stack.provider_held("simulated"):
        job = await stack.create_job(body)
        await open_page(page, f"/jobs/{job['id']}")
        await expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live")
    await wait_for_tokens(page, STEP_TOKENS + 10)  # into the second step
    before = await seen(page)

    await page.reload()
    expected = steps_text(3)
    await expect_finished(page, "succeeded", expected)
    assert (await get_job(stack, job["id"]))["result"]["text"] == expected
    after = await seen(page)
    assert_prefixes(before["outputs"] + after["outputs"], expected)
    first_shown = next(value for value in after["outputs"] if value)
    assert len(first_shown) >= len(before["outputs"][-1])


async def test_on_a_phone_the_form_and_the_card_fit_the_screen(
    page: Page, stack: Stack, output_dir: Path
) -> None:
    await page.set_viewport_size({"width": 390, "height": 844})
    await fill_review(page)
    assert await page.evaluate("document.documentElement.scrollWidth") <= 390
    await page.screenshot(path=str(output_dir / "phone-form.png"), full_page=True)
    await start(page)
    await expect_finished(page, "succeeded")
    await expect(page.get_by_test_id("result-output")).to_be_visible()
    assert await page.evaluate("document.documentElement.scrollWidth") <= 390
    card = await page.locator("#result-card").bounding_box()
    assert card is not None and card["x"] >= 0 and card["x"] + card["width"] <= 390
    shot = output_dir / "phone-structured-output.png"
    await page.screenshot(path=str(shot), full_page=True)
    shutil.copyfile(shot, OUTPUT_DIR / "page-phone-structured-output.png")
