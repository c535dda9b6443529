"""`python -m jobstream.server` as deployed: the headers of its answers, the page under its
Content-Security-Policy in a real Chromium, and its metrics port (server/security_headers.py,
server/listeners.py)."""

from __future__ import annotations

import pytest
from playwright.async_api import Page

from jobstream.ports import free_port
from tests.e2e.conftest import Stack
from tests.support.http_server import http_client
from tests.support.job_page import count_text, expect_finished, submit_form
from tests.support.processes import Processes

pytestmark = pytest.mark.e2e

# Every Content-Security-Policy violation the page meets, as the browser reports it.
CSP_SCRIPT = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__violations.push(`${event.violatedDirective} ${event.blockedURI}`);
});
"""


async def test_the_server_names_no_software_and_sends_the_security_headers(stack: Stack) -> None:
    for path in ("/", "/api/jobs", "/healthz", "/nowhere"):
        response = await stack.http.get(path)
        assert "server" not in response.headers, path
        assert response.headers["x-content-type-options"] == "nosniff", path
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"], path


async def test_the_page_works_under_its_content_security_policy(page: Page, stack: Stack) -> None:
    await page.add_init_script(CSP_SCRIPT)
    job_id = await submit_form(page, 20, speed=0)
    await expect_finished(page, "succeeded", count_text(20))
    # A job the page cancels: its POST passes the cross-origin guard, Origin and all.
    job = await stack.create_job({"prompt": "wait", "delay_s": 3600})
    await page.goto(f"/jobs/{job['id']}")
    await page.get_by_role("button", name="Cancel job").click()
    await expect_finished(page, "cancelled")
    assert await page.evaluate("window.__violations") == [], job_id


async def test_the_metrics_port_of_a_server_process(
    process_group: Processes, database_url: str
) -> None:
    stack = Stack(process_group, database_url)
    metrics_port = free_port()
    stack.env |= {"JOBSTREAM_METRICS_PORT": str(metrics_port), "JOBSTREAM_REQUIRE_API_KEY": "true"}
    try:
        await stack.start()
        assert (await stack.http.get("/metrics")).status_code == 404
        async with http_client(f"http://127.0.0.1:{metrics_port}", timeout=10) as scraper:
            scraped = await scraper.get("/metrics")
            assert scraped.status_code == 200, scraped.text
            assert "jobstream_jobs_created_total" in scraped.text
            assert (await scraper.get("/readyz")).status_code == 200
            assert (await scraper.get("/api/jobs")).status_code == 404
    finally:
        await stack.aclose()
