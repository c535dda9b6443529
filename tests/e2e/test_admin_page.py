"""The operator dashboard (/admin/, static/admin/) in a real Chromium, against a live server and
two workers running a mixed load (tests/support/admin_load.py): the overview's counts against
the database's own count, the charts moving while jobs run, filters, search and paging finding
a job, a job's attempts and cost, Cancel and Retry from the page as the API then shows them, and
a SIGKILLed worker shown stale within the heartbeat window. Screenshots at 1280 and 390 px go to
test-output/admin/ (docs/admin.md shows one of each).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from typing import Any

import asyncpg
import pytest
from playwright.async_api import Browser, BrowserContext, Page, ViewportSize, expect

from tests.e2e.conftest import OUTPUT_DIR, Stack
from tests.support.admin_load import LONG_KEY, LONG_TICKET, Creator, Load, simulated, start_load
from tests.support.polling import eventually
from tests.support.processes import ManagedProcess, Processes

pytestmark = pytest.mark.e2e

APP = "tests.support.user_jobs:app"
ADMIN_KEY = "admin-e2e-operator-key"
# Short, so a killed worker turns stale within the test: its renewals, and so its heartbeats,
# come every third of the lease (2 s), and the window is the server's default, 2/3 of it.
LEASE_S = 6.0
HEARTBEAT_WINDOW_S = 4.0
# The dashboard reads again every 3 s (static/admin/*.js REFRESH_MS).
REFRESH_S = 3.0
# The janitor folds the overview's per-minute series: every second here, so a minute's counts
# reach the charts about as soon as the jobs end.
JANITOR_INTERVAL_S = "1"
SHOTS = OUTPUT_DIR / "admin"
PHONE: ViewportSize = {"width": 390, "height": 844}
DESKTOP: ViewportSize = {"width": 1280, "height": 900}
TIMEOUT_MS = 30_000
TERMINAL = ("succeeded", "failed", "cancelled", "dead")
# What the overview counts (an index each): the jobs not finished, and the failed and dead.
COUNTED = ["queued", "running", "cancelling", "failed", "dead"]


@pytest.fixture(autouse=True)
def patient_expect() -> Iterator[None]:
    """Assertions wait up to TIMEOUT_MS, not Playwright's 5 s: beside other suites on two cores
    a read, a refresh and a redraw may take longer. Put back for the other tests after."""
    expect.set_options(timeout=TIMEOUT_MS)
    try:
        yield
    finally:
        expect.set_options(timeout=None)


@pytest.fixture
async def fleet(
    process_group: Processes, database_url: str, pool: asyncpg.Pool
) -> AsyncIterator[tuple[Stack, ManagedProcess]]:
    """The server and its first worker (conftest's Stack), with the test app, the admin key and
    the short lease, and a second worker beside them; both workers' rows are there first."""
    stack = Stack(process_group, database_url)
    stack.env.update(
        {
            "JOBSTREAM_APP": APP,
            "JOBSTREAM_ADMIN_KEY": ADMIN_KEY,
            "JOBSTREAM_LEASE_S": str(LEASE_S),
            "JOBSTREAM_HEARTBEAT_WINDOW_S": str(HEARTBEAT_WINDOW_S),
            "JOBSTREAM_JANITOR_INTERVAL_S": JANITOR_INTERVAL_S,
        }
    )
    try:
        await stack.start()
        second = process_group.spawn("worker", stack.env, name="worker-2")
        await eventually(
            lambda: pool.fetchval("SELECT count(*) FROM workers WHERE stopped_at IS NULL"),
            lambda n: n == 2,
            what="both workers have their rows",
            timeout_s=60,
            interval_s=0.2,
        )
        yield stack, second
    finally:
        await stack.aclose()


async def new_page(
    browser: Browser, stack: Stack, viewport: ViewportSize
) -> tuple[BrowserContext, Page, list[str]]:
    context = await browser.new_context(base_url=stack.base_url, viewport=viewport)
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    # The page runs under the server's CSP (no inline code): anything it refused is a fault.
    page.on(
        "console",
        lambda message: (
            errors.append(message.text)
            if message.type == "error" and "Content Security Policy" in message.text
            else None
        ),
    )
    return context, page, errors


async def sign_in(page: Page, section: str = "#/overview") -> None:
    """Open the dashboard: refused without a key, it asks for one, then shows the section."""
    await page.goto(f"/admin/{section}")
    await expect(page.get_by_role("textbox", name="Admin key")).to_be_visible()
    await page.get_by_role("textbox", name="Admin key").fill(ADMIN_KEY)
    await page.get_by_role("button", name="Use key").click()
    await expect(page.locator("#key-form")).to_be_hidden()


async def admin_get(stack: Stack, path: str) -> Any:
    response = await stack.http.get(
        f"/admin/api{path}", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    )
    assert response.status_code == 200, response.text
    return response.json()


async def settled(pool: asyncpg.Pool, load: Load) -> None:
    """Every job of the load ended, but the long one, left running."""
    long_id = load.one("long")
    await eventually(
        lambda: pool.fetchval(
            "SELECT count(*) FROM jobs WHERE NOT status = ANY($1::text[]) AND id <> $2",
            list(TERMINAL),
            long_id,
        ),
        lambda n: n == 0,
        what="the load's jobs all ended",
        timeout_s=120,
        interval_s=0.5,
    )


async def page_counts(page: Page) -> dict[str, int]:
    """The overview's counts table as {"job|tenant|status": n}."""
    counts: dict[str, int] = await page.evaluate(
        """() => {
          const out = {};
          for (const tr of document.querySelectorAll("[data-testid=counts] tbody tr")) {
            for (const td of tr.querySelectorAll("td[data-status]")) {
              const n = Number(td.textContent.replaceAll(",", ""));
              if (n) out[`${tr.dataset.job}|${tr.dataset.tenant}|${td.dataset.status}`] = n;
            }
          }
          return out;
        }"""
    )
    return counts


async def database_counts(pool: asyncpg.Pool, statuses: list[str]) -> dict[str, int]:
    rows = await pool.fetch(
        "SELECT job_name, tenant_id, status, count(*) AS n FROM jobs"
        " WHERE status = ANY($1::text[]) GROUP BY 1, 2, 3",
        statuses,
    )
    return {f"{r['job_name']}|{r['tenant_id']}|{r['status']}": r["n"] for r in rows}


async def chart_data(page: Page, testid: str) -> str:
    """What a chart draws now (uPlot's data, its y series), as JSON to compare; once it has
    drawn the overview's series (uPlot is imported when the overview first shows)."""
    await expect(page.get_by_test_id(testid)).to_have_attribute("data-points", re.compile(r"\d"))
    data: str = await page.get_by_test_id(testid).evaluate(
        "el => JSON.stringify(el.uplot.data.slice(1))"
    )
    return data


async def test_the_dashboard_shows_and_acts_on_a_fleet_under_load(
    browser: Browser, fleet: tuple[Stack, ManagedProcess], pool: asyncpg.Pool
) -> None:
    stack, second_worker = fleet
    SHOTS.mkdir(parents=True, exist_ok=True)
    context, page, errors = await new_page(browser, stack, DESKTOP)
    try:
        await sign_in(page)
        throughput_before = await chart_data(page, "chart-throughput")

        load = await start_load(stack.http, pool)
        long_id = load.one("long")

        # The charts move while the jobs run: the same chart, drawn again from a new series.
        await page.wait_for_function(
            """([before]) => {
                 const chart = document.querySelector("[data-testid=chart-throughput]");
                 return JSON.stringify(chart.uplot.data.slice(1)) !== before;
               }""",
            arg=[throughput_before],
            timeout=120_000,
        )
        moving = await chart_data(page, "chart-throughput")
        assert moving != throughput_before
        assert any(sum(v or 0 for v in series) > 0 for series in json.loads(moving))
        # And again with the next jobs: two reads while jobs run, two different charts.
        for _ in range(5):
            await Creator(stack.http, load).must("more", "default", simulated(20, 0))
        await page.wait_for_function(
            """([before]) => {
                 const chart = document.querySelector("[data-testid=chart-throughput]");
                 return JSON.stringify(chart.uplot.data.slice(1)) !== before;
               }""",
            arg=[moving],
            timeout=60_000,
        )

        # The overview's counts are the database's, once the load has ended (the long job runs).
        await settled(pool, load)
        await expect(page.get_by_test_id("counts")).to_be_visible()
        expected = await database_counts(pool, COUNTED)
        assert {k.split("|")[2] for k in expected} >= {"running", "failed", "dead"}, expected
        await eventually(
            lambda: page_counts(page),
            lambda seen: {k: v for k, v in seen.items() if k.split("|")[2] in COUNTED} == expected,
            what=f"the overview's counts are the database's {expected}",
            timeout_s=30,
            interval_s=0.25,
        )
        # Spend: globex, over its budget, spent what its jobs ran, by tenant, job and model; a
        # minute joins the spend once it has ended (jobstream/series.py).
        await expect(
            page.get_by_test_id("spend-hour").locator("tr", has_text="globex")
        ).not_to_have_count(0, timeout=90_000)
        await expect(
            page.get_by_test_id("providers").locator("[data-provider=simulated]")
        ).to_be_visible()
        await page.screenshot(path=str(SHOTS / "overview-1280.png"), full_page=True)
        # A count opens its jobs in the list, filtered to them.
        counts = page.get_by_test_id("counts")
        await counts.locator("tr[data-job=fail][data-tenant=acme] td[data-status=dead] a").click()
        await expect(page.get_by_label("Status")).to_have_value("dead")
        await expect(page.get_by_test_id("jobs-table").locator("tbody tr")).to_have_count(
            expected["fail|acme|dead"]
        )

        await dead_letters_grouped_and_retried(page, load)
        await jobs_filter_search_and_paging(page, load)
        await job_view_shows_attempts_and_cost(page, load, pool)
        await cancel_and_retry_from_the_page(page, stack, load, long_id)
        await killed_worker_turns_stale(page, pool, second_worker)
        # More jobs while the page watches the overview again, for the screenshots.
        await Creator(stack.http, load).must("late", "default", simulated(20, 0))
        await phone_screenshots(browser, stack, load)
    finally:
        await context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


async def dead_letters_grouped_and_retried(page: Page, load: Load) -> None:
    await page.get_by_role("link", name="Dead letters").click()
    groups = page.get_by_test_id("dead-groups")
    busy = groups.locator("tr", has_text="the service is busy")
    await expect(busy).to_contain_text("transient")
    await expect(busy.locator("a[href*='" + load.one("dead") + "']")).to_have_count(1)
    # The permanent failures are failed, not dead: the API refuses their retry, and says so.
    permanent = groups.locator("tr", has_text="this document cannot be read")
    await permanent.get_by_role("checkbox").check()
    await page.get_by_role("button", name="Retry 2 selected").click()
    await page.get_by_role("dialog").get_by_role("button", name="Retry them").click()
    await expect(page.locator("#dead-result")).to_have_text("Retried 0 as new jobs; 2 refused.")


async def shown(page: Page, *, page_number: int = 1, **filters: str) -> list[str]:
    """Wait until the jobs table shows the answer to exactly these filters (and page); its ids."""
    await page.wait_for_function(
        """([want, number]) => {
             const results = document.getElementById("jobs-results");
             const got = JSON.parse(results.dataset.filters || "null");
             const same = (a, b) => JSON.stringify(Object.entries(a).sort()) ===
                                    JSON.stringify(Object.entries(b).sort());
             return got && same(got, want) && results.dataset.page === String(number);
           }""",
        arg=[filters, page_number],
    )
    ids: list[str] = await page.locator("#jobs-results tbody tr").evaluate_all(
        "trs => trs.map(tr => tr.dataset.id)"
    )
    return ids


async def jobs_filter_search_and_paging(page: Page, load: Load) -> None:
    await page.get_by_role("link", name="Jobs", exact=True).click()
    await expect(page.get_by_test_id("jobs-table")).to_be_visible()
    await page.get_by_role("button", name="Clear").click()
    await shown(page)

    # Filters: acme's failed `fail` jobs are the two permanent ones, newest first.
    await page.get_by_label("Status").select_option("failed")
    await page.get_by_label("Job name").fill("fail")
    await page.get_by_label("Tenant").fill("acme")
    await page.get_by_role("button", name="Filter").click()
    ids = await shown(page, status="failed", job="fail", tenant="acme")
    assert sorted(ids) == sorted(load.ids["permanent"])
    assert ids == sorted(ids, reverse=True)  # UUIDv7: newest first is the ids' order

    # Search: by the idempotency key, by metadata, by id, by short id, the long job alone.
    await page.get_by_role("button", name="Clear").click()
    await shown(page)
    long_id = load.one("long")
    for needle in (LONG_KEY, LONG_TICKET, long_id, long_id.replace("-", "")[-8:]):
        await page.get_by_label("Search").fill(needle)
        await page.get_by_role("button", name="Filter").click()
        assert await shown(page, q=needle) == [long_id], needle
    # A time range that ends before the load began finds nothing.
    await page.get_by_label("Search").fill("")
    await page.get_by_label("Created before").fill("2001-01-01T00:00:00")
    await page.get_by_role("button", name="Filter").click()
    until = await page.evaluate("new Date('2001-01-01T00:00:00').toISOString()")
    assert await shown(page, until=until) == []
    await expect(page.locator("#jobs-summary")).to_have_text("No job matches.")

    # Paging: the default tenant's 36 jobs, 25 a page: the first one made is on the second.
    await page.get_by_role("button", name="Clear").click()
    await shown(page)
    await page.get_by_label("Tenant").fill("default")
    await page.get_by_role("button", name="Filter").click()
    first_page = await shown(page, tenant="default")
    assert len(first_page) == 25 and long_id not in first_page
    await page.get_by_role("button", name="Next").click()
    second_page = await shown(page, page_number=2, tenant="default")
    assert second_page and not set(first_page) & set(second_page)
    assert long_id in second_page
    assert first_page + second_page == sorted(first_page + second_page, reverse=True)
    await expect(page.get_by_role("button", name="Next")).to_be_disabled()
    await page.get_by_role("button", name="Previous").click()
    assert await shown(page, tenant="default") == first_page
    await page.screenshot(path=str(SHOTS / "jobs-1280.png"), full_page=True)


async def open_job(page: Page, job_id: str) -> None:
    """The job's view, once it shows this job (a hash change: the last view was on screen)."""
    await page.goto(f"/admin/#/jobs/{job_id}")
    await expect(page.locator("#job-title")).to_have_text(f"Job {job_id.replace('-', '')[-8:]}")


async def job_view_shows_attempts_and_cost(page: Page, load: Load, pool: asyncpg.Pool) -> None:
    # The dead job: three attempts, each failed with its error kind and message.
    dead_id = load.one("dead")
    await open_job(page, dead_id)
    await expect(page.get_by_test_id("job-status")).to_have_text("dead")
    attempts = page.get_by_test_id("attempts").locator("tbody tr[data-attempt]")
    await expect(attempts).to_have_count(3)
    await expect(attempts.first).to_contain_text("transient")  # the error's kind
    await expect(page.get_by_test_id("attempts").locator("tr.attempt-error").first).to_contain_text(
        "the service is busy"
    )
    await expect(
        page.get_by_test_id("job-events").locator("li[data-type=attempt_error]")
    ).to_have_count(3)

    # A job whose code raised: its traceback, behind a fold, for operators alone.
    await open_job(page, load.one("crashed"))
    await expect(page.get_by_test_id("job-status")).to_have_text(re.compile("^(failed|dead)$"))
    traceback = page.get_by_test_id("attempts").locator("details").first
    await traceback.locator("summary").click()
    await expect(traceback.locator("pre")).to_contain_text("KeyError")

    # A simulated job's cost, as its attempt row has it.
    quick_id = load.ids["quick"][0]
    cost = await pool.fetchval("SELECT cost_usd FROM job_attempts WHERE job_id = $1", quick_id)
    assert cost is not None and Decimal(cost) > 0
    await open_job(page, quick_id)
    await expect(page.get_by_test_id("job-status")).to_have_text("succeeded")
    cell = page.get_by_test_id("attempts").locator("tr[data-attempt='1'] td[data-cost]")
    await expect(cell).not_to_have_attribute("data-cost", "")
    assert float(await cell.get_attribute("data-cost") or "nan") == pytest.approx(float(cost))
    await expect(page.get_by_test_id("attempts").locator("tr[data-attempt='1']")).to_contain_text(
        "succeeded"
    )
    await expect(page.get_by_test_id("job-text")).to_have_text("".join(f"{i} " for i in range(20)))


async def cancel_and_retry_from_the_page(
    page: Page, stack: Stack, load: Load, long_id: str
) -> None:
    # The worker running the long job lists it, a link to its view.
    await page.get_by_role("link", name="Workers").click()
    running = page.get_by_test_id("workers").locator(f"a[href='#/jobs/{long_id}']")
    await expect(running).to_have_text(long_id.replace("-", "")[-8:])
    # Its text, live over the public events stream, then Cancel after a confirmation.
    await running.click()
    await expect(page.locator("#job-title")).to_have_text(f"Job {long_id.replace('-', '')[-8:]}")
    await expect(page.locator("#job-text-state")).to_have_attribute("data-state", "live")
    await expect(page.get_by_test_id("job-text")).to_contain_text("0 1 2 ")
    await page.get_by_role("button", name="Cancel…").click()
    dialog = page.get_by_role("dialog")
    await expect(dialog).to_contain_text("Cancel job")
    await page.screenshot(path=str(SHOTS / "confirm-1280.png"))
    await dialog.get_by_role("button", name="Cancel job").click()
    await expect(page.get_by_test_id("job-status")).to_have_text("cancelled", timeout=TIMEOUT_MS)
    assert (await stack.http.get(f"/api/jobs/{long_id}")).json()["status"] == "cancelled"

    # Retry the dead job: a new job (the API's retry of a dead job), which the page opens, and
    # which the API has, the dead one naming it.
    dead_id = load.one("dead")
    await open_job(page, dead_id)
    await expect(page.get_by_test_id("job-status")).to_have_text("dead")
    await page.get_by_role("button", name="Retry…").click()
    await page.get_by_role("dialog").get_by_role("button", name="Retry as a new job").click()
    await page.wait_for_url(lambda url: "#/jobs/" in url and dead_id not in url)
    new_id = page.url.split("#/jobs/")[1]
    await expect(page.locator("#job-notice")).to_contain_text("A retry of job")
    acme = {"Authorization": f"Bearer {load.keys['acme']}"}
    created = await stack.http.get(f"/api/jobs/{new_id}", headers=acme)
    assert created.status_code == 200, created.text
    assert created.json()["job"] == "fail"
    retried = (await admin_get(stack, f"/jobs/{dead_id}"))["job"]
    assert (retried["status"], retried["retried_as"]) == ("dead", new_id)


async def killed_worker_turns_stale(page: Page, pool: asyncpg.Pool, worker: ManagedProcess) -> None:
    await page.get_by_role("link", name="Workers").click()
    table = page.get_by_test_id("workers")
    await expect(table.locator("tr[data-state=live]")).to_have_count(2)
    row = table.locator(f"tr[data-pid='{worker.pid}']")
    await expect(row).to_have_attribute("data-state", "live")
    worker.kill()
    killed_at = time.monotonic()
    await worker.wait_async(10)
    # Stale once its last heartbeat is older than the window; the page reads every 3 s.
    await expect(row).to_have_attribute(
        "data-state", "stale", timeout=int((HEARTBEAT_WINDOW_S + REFRESH_S + 5) * 1000)
    )
    took = time.monotonic() - killed_at
    assert took <= HEARTBEAT_WINDOW_S + REFRESH_S + 5, took
    await page.screenshot(path=str(SHOTS / "workers-1280.png"), full_page=True)


async def fits_the_phone(page: Page) -> None:
    """Nothing wider than the phone but the tables, which scroll sideways in their own box."""
    overflow = await page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"{page.url} is {overflow} px wider than the phone"


async def phone_screenshots(browser: Browser, stack: Stack, load: Load) -> None:
    context, page, errors = await new_page(browser, stack, PHONE)
    try:
        await sign_in(page)
        await expect(page.get_by_test_id("counts")).to_be_visible()
        await page.wait_for_function(
            "document.querySelector('[data-testid=chart-throughput]').dataset.points > 0"
        )
        await fits_the_phone(page)
        await page.screenshot(path=str(SHOTS / "overview-390.png"), full_page=True)
        await page.goto("/admin/#/jobs")
        await expect(page.get_by_test_id("jobs-table")).to_be_visible()
        await fits_the_phone(page)
        await page.screenshot(path=str(SHOTS / "jobs-390.png"), full_page=True)
        await open_job(page, load.one("crashed"))
        await expect(page.get_by_test_id("attempts")).to_be_visible()
        await fits_the_phone(page)
        await page.screenshot(path=str(SHOTS / "job-390.png"), full_page=True)
        await page.get_by_role("link", name="Workers").click()
        await expect(page.get_by_test_id("workers")).to_be_visible()
        await fits_the_phone(page)
        await page.screenshot(path=str(SHOTS / "workers-390.png"), full_page=True)
    finally:
        await context.close()
    assert not errors, f"uncaught errors in the phone's page: {errors}"
