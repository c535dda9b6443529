"""Driving the job page in a browser: open it with a script that records every value the output,
status and connection indicator take, submit its form, and check what the user saw. Jobs use
the simulated provider's "count" pattern, the i-th token being "{i} "."""

from __future__ import annotations

from typing import Any, TypedDict

from playwright.async_api import Page, expect

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
    try:
        await expect(page.get_by_test_id("status")).to_have_text(status, timeout=FINISH_TIMEOUT_MS)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{await _post_mortem(page)}") from None
    if text is not None:
        assert await page.get_by_test_id("output").text_content() == text
    # The page swaps in result.text (and says so) only if its own reassembly went wrong.
    await expect(page.locator("[data-kind=mismatch]")).to_have_count(0)


async def _post_mortem(page: Page) -> str:
    """What the page saw and said, and what the API says of the job now: a CI log shows only
    the assertion, and a status that never came has several possible causes."""
    report = await page.evaluate(
        """async () => {
          const id = location.pathname.split("/").pop();
          const reply = await fetch(`/api/jobs/${id}`).catch((err) => null);
          const job = reply && reply.ok ? await reply.json() : null;
          const note = document.getElementById("action-note");
          return {
            statuses: window.__seen.statuses,
            connections: window.__seen.connections,
            action_note: note ? note.textContent : null,
            api_status: job ? job.status : (reply ? reply.status : "unreachable"),
            api_attempts: job ? job.attempts : null,
          };
        }"""
    )
    return f"post-mortem: {report}"


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


# Every state the progress bar takes: null while hidden, else [value, text beside it].
PROGRESS_SCRIPT = """
window.__progress = [];
document.addEventListener("readystatechange", () => {
  if (document.readyState !== "interactive") return;
  const box = document.getElementById("progress");
  const bar = document.querySelector("[data-testid=progress]");
  const text = document.querySelector("[data-testid=progress-text]");
  const list = window.__progress;
  new MutationObserver(() => {
    const state = box.hidden ? null : [bar.value, text.textContent];
    if (JSON.stringify(list[list.length - 1]) !== JSON.stringify(state)) list.push(state);
  }).observe(box, { attributes: true, childList: true, characterData: true, subtree: true });
});
"""
