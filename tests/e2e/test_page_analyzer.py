"""The document analyzer (examples/document_analysis.py) on the page, end to end: real Chromium,
and server and worker processes started with `JOBSTREAM_APP=examples.document_analysis:app`.

A pasted text and a PDF chosen through the form's file input are analysed; the answer's JSON
grows live in the job's text, the progress bar goes to its end, and the validated Analysis
shows as a card. A reload mid-stream resumes exactly, and shows the bar where it was from the
job resource alone. A file too large to send is named at its field. The page holds at 390 px.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Locator, Page, ViewportSize, expect

from examples.document_analysis import Document, extract_text
from tests.e2e.conftest import OUTPUT_DIR, Stack, running_stack
from tests.support.job_page import (
    PROGRESS_SCRIPT,
    assert_prefixes,
    expect_finished,
    open_page,
    seen,
)
from tests.support.pdf import pdf_with_text
from tests.support.processes import Processes

pytestmark = pytest.mark.e2e

APP = "examples.document_analysis:app"
JOB = "document_analysis"
SCREENSHOTS = Path("/tmp")
PHONE: ViewportSize = {"width": 390, "height": 844}


MEMO = """Quarterly operations memo

Revenue grew 12% this quarter on the durable jobs product, and churn fell to 1.1%.
One customer now brings 40% of revenue: losing it would hurt.
The on-call rotation has three people; two of them leave in the spring.
The database upgrade is planned for May, with a rollback rehearsed twice.
"""

REPORT = [
    ["Annual report 2026: the platform served 4.2 million jobs with no lost results."],
    ["Risks: the storage bill doubled; a single region hosts every worker."],
]


@pytest.fixture
async def stack(process_group: Processes, database_url: str) -> AsyncIterator[Stack]:
    """conftest's stack, running the analyzer: the `page` fixture opens this one."""
    async with running_stack(process_group, database_url, app=APP) as started:
        yield started


@contextmanager
def worker_frozen(stack: Stack) -> Iterator[None]:
    """The worker stopped (SIGSTOP) inside the block, and continued after: a running job stays
    running, its text and progress exactly where they are, for as long as the test needs (far
    below its 30 s lease). How a reload is known to happen mid-stream, without a race."""
    assert stack.worker is not None and stack.worker.returncode is None
    os.kill(stack.worker.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(stack.worker.pid, signal.SIGCONT)


def format_bytes(size: int) -> str:
    """static/schema_form.js's formatBytes, for the sizes of these tests' files."""
    if size < 1024:
        return f"{size} B"
    kb = size / 1024
    assert kb < 1024
    return f"{kb:.1f} KB" if kb < 10 else f"{round(kb)} KB"


def analysing(text: str) -> str:
    """The handler's progress message once the text is extracted."""
    return f"analysing {len(text.split()):,} words"


async def progress_states(page: Page) -> list[Any]:
    states: list[Any] = await page.evaluate("window.__progress")
    return [state for state in states if state is not None]


async def get_job(stack: Stack, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = (await stack.http.get(f"/api/jobs/{job_id}")).json()
    return job


async def choose_analyzer(page: Page) -> None:
    await open_page(page, "/")
    await page.get_by_role("combobox", name="Job", exact=True).select_option(JOB)
    await expect(page.get_by_label("Title")).to_have_value("Untitled")  # the model's default


async def start(page: Page) -> tuple[str, dict[str, Any]]:
    """Submit the form; the new job's id, and the input the page sent (the job resource shows
    the model's, defaults filled in, so only the request tells what was left out)."""
    async with page.expect_request(
        lambda request: request.method == "POST" and request.url.endswith("/api/jobs")
    ) as created:
        await page.get_by_role("button", name="Start job").click()
    await page.wait_for_url("**/jobs/*")
    sent = (await created.value).post_data_json
    assert isinstance(sent, dict) and sent["job"] == JOB
    return page.url.rsplit("/", 1)[-1], sent["input"]


async def wait_live(page: Page) -> None:
    await expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live")


async def scroll_width(page: Page) -> int:
    width: int = await page.evaluate("document.documentElement.scrollWidth")
    return width


async def expect_analysis_card(page: Page, output: dict[str, Any]) -> None:
    """The card shows the Analysis field by field, under its titles: nothing of it as JSON."""
    card = page.get_by_test_id("result-output")
    await expect(card).to_be_visible()
    await expect(card.locator(":scope > dl > dt")).to_have_text(
        ["Summary", "Key Points", "Risks", "Sentiment"]
    )

    def field(key: str) -> Locator:
        return card.locator(f":scope > dl > dd[data-key={key}]")

    await expect(field("summary")).to_have_text(output["summary"])
    # Key points one a line, as a list.
    await expect(field("key_points").locator("ul > li")).to_have_text(output["key_points"])
    risks = field("risks").locator("ol > li")
    await expect(risks).to_have_count(len(output["risks"]))
    for i, risk in enumerate(output["risks"]):
        row = risks.nth(i)
        await expect(row.locator("dt")).to_have_text(["Description", "Severity"])
        await expect(row.locator("dd[data-key=description]")).to_have_text(risk["description"])
        # Severity as a badge that carries its value (styled by it).
        badge = row.locator("dd[data-key=severity] .value-enum")
        await expect(badge).to_have_text(risk["severity"])
        await expect(badge).to_have_attribute("data-value", risk["severity"])
    sentiment = field("sentiment").locator(".value-enum")
    await expect(sentiment).to_have_text(output["sentiment"])
    assert "{" not in (await card.text_content() or ""), "raw JSON in the card"


async def test_a_pasted_text_streams_its_json_live_and_ends_as_a_card(
    page: Page, stack: Stack, output_dir: Path
) -> None:
    await page.set_viewport_size({"width": 1180, "height": 900})
    await page.add_init_script(PROGRESS_SCRIPT)
    # Held until the page follows live: every token and progress event reaches it as it comes.
    async with stack.provider_held("simulated"):
        await choose_analyzer(page)
        await page.get_by_label("Title").fill("Operations memo")
        await page.get_by_label("Text", exact=True).fill(MEMO)
        await expect(page.get_by_label("PDF file")).to_have_attribute(
            "accept", "application/pdf,.pdf"
        )
        job_id, sent = await start(page)
        await wait_live(page)

    # Only what was filled in: the empty file field is left out, as the model requires.
    assert sent == {"title": "Operations memo", "text": MEMO}
    await expect_finished(page, "succeeded")
    job = await get_job(stack, job_id)
    assert job["input"]["text"] == MEMO and job["input"]["pdf_base64"] is None
    final = job["result"]["text"]
    output = job["result"]["output"]
    assert json.loads(final) == output

    # The JSON grew on the page: many states, each a prefix of the final text, then all of it.
    await expect(page.get_by_test_id("output")).to_have_text(final)
    outputs = (await seen(page))["outputs"]
    assert_prefixes(outputs, final)
    partial = [text for text in outputs if text and text != final]
    assert len(partial) >= 5, f"the JSON did not arrive as a stream: {partial}"
    assert not partial[0].endswith("}"), "the first text shown was already a whole answer"

    # The bar: each of the job's reports in turn, to its end.
    assert await progress_states(page) == [
        [0.05, "5% · reading the document"],
        [0.25, f"25% · {analysing(MEMO)}"],
        [1, "100% · analysed"],
    ]
    bar = page.get_by_role("progressbar", name="Progress")
    await expect(bar).to_have_js_property("value", 1)
    await expect(bar).to_have_accessible_description("100% · analysed")

    await expect_analysis_card(page, output)
    await expect(page.get_by_test_id("job-name")).to_have_text(JOB)
    header = page.get_by_test_id("job-input")
    # What was given; the file left out is not listed.
    await expect(header.locator("dt")).to_have_text(["Title", "Text"])
    await expect(header.locator("dd[data-key=title]")).to_have_text("Operations memo")
    # The answer's JSON, set as code.
    await expect(page.get_by_test_id("output")).to_have_class("output output-json")
    shot = SCREENSHOTS / "analyzer-desktop.png"
    await page.screenshot(path=str(shot), full_page=True)
    shutil.copyfile(shot, output_dir / shot.name)
    shutil.copyfile(shot, OUTPUT_DIR / "page-analyzer-desktop.png")

    # Opened again, finished: the text, the card, and the bar full, from the job resource.
    await page.reload()
    await expect_finished(page, "succeeded", final)
    await expect(page.get_by_test_id("progress-text")).to_have_text("100% · analysed")
    await expect(bar).to_have_js_property("value", 1)
    await expect_analysis_card(page, output)


async def test_a_reload_mid_stream_resumes_the_json_exactly(
    page: Page, stack: Stack, output_dir: Path
) -> None:
    await page.set_viewport_size({"width": 1180, "height": 900})
    await page.add_init_script(PROGRESS_SCRIPT)
    body = {"job": JOB, "input": {"title": "Operations memo", "text": MEMO}}
    async with stack.provider_held("simulated"):
        job = await stack.create_job(body)
        await open_page(page, f"/jobs/{job['id']}")
        await wait_live(page)
    # Some of the JSON, not all of it: the worker is stopped there, so the job is still running
    # (and its text and progress stand still) while the page reloads.
    await page.wait_for_function(
        "n => document.querySelector('[data-testid=output]').textContent.length >= n", arg=24
    )
    with worker_frozen(stack):
        before = await seen(page)
        await page.reload()
        await expect(page.get_by_test_id("status")).to_have_text("running")
        await wait_live(page)
        snapshot = await get_job(stack, job["id"])
        assert snapshot["status"] == "running"
        # The page shows what the server has: the text so far and, though no progress event
        # can come while the worker stands still, the bar where it is.
        await expect(page.get_by_test_id("output")).to_have_text(snapshot["output"]["text"])
        assert snapshot["progress"] == {"fraction": 0.25, "message": analysing(MEMO)}
        await expect(page.get_by_test_id("progress-text")).to_have_text(f"25% · {analysing(MEMO)}")
        await expect(page.get_by_role("progressbar", name="Progress")).to_have_js_property(
            "value", 0.25
        )
        shot = SCREENSHOTS / "analyzer-live.png"
        await page.screenshot(path=str(shot), full_page=True)
        shutil.copyfile(shot, output_dir / shot.name)
    partial = snapshot["output"]["text"]
    assert len(partial) >= len(before["outputs"][-1]) > 0

    await expect_finished(page, "succeeded")
    done = await get_job(stack, job["id"])
    final = done["result"]["text"]
    await expect(page.get_by_test_id("output")).to_have_text(final)
    assert final.startswith(partial) and final != partial
    after = await seen(page)
    assert_prefixes(before["outputs"] + after["outputs"], final)
    # After the reload: the snapshot's text, never less than was shown before, then the rest.
    shown = [text for text in after["outputs"] if text]
    assert len(shown[0]) >= len(before["outputs"][-1])
    assert partial in shown and shown[-1] == final
    await expect(page.get_by_test_id("progress-text")).to_have_text("100% · analysed")
    await expect_analysis_card(page, done["result"]["output"])


async def test_a_pdf_chosen_in_the_file_input_is_analysed(
    page: Page, stack: Stack, tmp_path: Path
) -> None:
    pdf = pdf_with_text(REPORT)
    path = tmp_path / "annual-report.pdf"
    path.write_bytes(pdf)
    encoded = base64.b64encode(pdf).decode()
    words = extract_text(Document(pdf_base64=encoded))
    await page.add_init_script(PROGRESS_SCRIPT)

    async with stack.provider_held("simulated"):
        await choose_analyzer(page)
        await page.get_by_label("Title").fill("Annual report")
        chooser = page.get_by_label("PDF file")
        await expect(chooser).to_have_attribute("type", "file")
        await expect(chooser).to_have_accessible_description("Or a PDF file, base64-encoded.")
        chosen = page.get_by_test_id("file-pdf_base64")
        await expect(chosen).to_be_hidden()
        # Chosen, taken back, chosen again: what was chosen shows, by name and size.
        await chooser.set_input_files(path)
        await expect(chosen).to_have_text(f"annual-report.pdf · {format_bytes(len(pdf))}")
        # Both a text and a PDF: the model refuses it (a 422), and the page stays on the form.
        await page.get_by_label("Text", exact=True).fill("A text as well.")
        await page.get_by_role("button", name="Start job").click()
        await expect(page.locator("#form-error")).to_contain_text("one of the two")
        assert page.url.endswith("/")
        await page.get_by_label("Text", exact=True).fill("")
        await page.get_by_role("button", name="Remove file").click()
        await expect(chosen).to_be_hidden()
        assert await chooser.evaluate("el => el.files.length") == 0
        await chooser.set_input_files(path)
        await expect(chosen).to_have_text(f"annual-report.pdf · {format_bytes(len(pdf))}")
        await expect(page.get_by_label("Text", exact=True)).to_have_value("")  # left empty
        job_id, sent = await start(page)
        await wait_live(page)

    # The file's bytes, as base64 with no data: prefix; the empty text left out.
    assert sent == {"title": "Annual report", "pdf_base64": encoded}
    await expect_finished(page, "succeeded")
    job = await get_job(stack, job_id)
    assert job["input"]["pdf_base64"] == encoded and job["input"]["text"] is None
    output = job["result"]["output"]
    await expect(page.get_by_test_id("output")).to_have_text(job["result"]["text"])
    assert_prefixes((await seen(page))["outputs"], job["result"]["text"])
    # The worker read the PDF: its words are what the handler reports analysing.
    assert await progress_states(page) == [
        [0.05, "5% · reading the document"],
        [0.25, f"25% · {analysing(words)}"],
        [1, "100% · analysed"],
    ]
    assert "4.2 million jobs" in words
    await expect_analysis_card(page, output)
    # The header says what was sent, not its bytes; so does the recent list.
    header = page.get_by_test_id("job-input")
    await expect(header.locator("dt")).to_have_text(["Title", "PDF file"])
    await expect(header.locator("dd[data-key=pdf_base64]")).to_have_text(
        f"PDF · {format_bytes(len(pdf))}"
    )
    assert encoded[:40] not in (await header.text_content() or "")
    recent = page.get_by_test_id("recent-jobs").locator("li").first
    await expect(recent).to_contain_text(f"{JOB} · Annual report · annual-report.pdf")
    assert "JVBER" not in (await recent.text_content() or "")


async def test_on_a_phone_the_form_and_the_finished_view_fit_the_screen(
    page: Page, stack: Stack, tmp_path: Path, output_dir: Path
) -> None:
    await page.set_viewport_size(PHONE)
    pdf = pdf_with_text(REPORT)
    # A long name with no break in it: the line under the chooser must wrap it.
    path = tmp_path / "annual-report-of-the-durable-jobs-platform-2026-final-v3.pdf"
    path.write_bytes(pdf)
    await choose_analyzer(page)
    await page.get_by_label("Title").fill("Annual report")
    await page.get_by_label("PDF file").set_input_files(path)
    await expect(page.get_by_test_id("file-pdf_base64")).to_contain_text(path.name)
    assert await scroll_width(page) <= PHONE["width"]
    chooser = await page.get_by_label("PDF file").bounding_box()
    assert chooser is not None and chooser["x"] + chooser["width"] <= PHONE["width"]
    await page.screenshot(path=str(output_dir / "analyzer-phone-form.png"), full_page=True)

    job_id, sent = await start(page)
    assert sent["pdf_base64"] == base64.b64encode(pdf).decode()
    await expect_finished(page, "succeeded")
    job = await get_job(stack, job_id)
    await expect_analysis_card(page, job["result"]["output"])
    await expect(page.get_by_test_id("output")).to_have_text(job["result"]["text"])
    assert await scroll_width(page) <= PHONE["width"]
    for part in ("#result-card", ".output-wrap", "#job-input"):
        box = await page.locator(part).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
    shot = SCREENSHOTS / "analyzer-phone.png"
    await page.screenshot(path=str(shot), full_page=True)
    shutil.copyfile(shot, output_dir / shot.name)
    shutil.copyfile(shot, OUTPUT_DIR / "page-analyzer-phone.png")


async def test_a_file_too_large_to_send_is_named_at_its_field(
    page: Page, stack: Stack, tmp_path: Path, output_dir: Path
) -> None:
    # 800 KB is 1.07 MB as base64: over the server's 1 MiB body limit (a 413).
    path = tmp_path / "scan.pdf"
    path.write_bytes(b"%PDF-1.4\n" + bytes(800 * 1024))
    await choose_analyzer(page)
    await page.get_by_label("PDF file").set_input_files(path)
    await expect(page.get_by_test_id("file-pdf_base64")).to_have_text("scan.pdf · 800 KB")
    await page.get_by_role("button", name="Start job").click()
    error = page.locator("#error-input-pdf_base64")
    await expect(error).to_have_text("800 KB is too large to send (1.0 MB as base64).")
    await expect(page.get_by_label("PDF file")).to_have_attribute("aria-invalid", "true")
    await expect(page.locator("#form-error")).to_contain_text("Request body too large")
    assert page.url.endswith("/")
    await page.screenshot(path=str(output_dir / "analyzer-file-too-large.png"), full_page=True)
