"""The seed's pipeline end to end (examples/document_analysis.py): a document, as text or as a
PDF made here, through a live server and worker on the simulated provider; followers get the
exact text, the GET the validated Analysis, the attempt its cost.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import asyncpg
import httpx
import orjson
import pytest

from examples.document_analysis import Analysis, app
from jobstream.server.app import create_app
from jobstream.settings import Settings
from tests.support.http_server import http_client, serve
from tests.support.openai_jobs import tenant_money
from tests.support.pdf import pdf_with_text
from tests.support.polling import eventually
from tests.support.sse_client import read_stream, reassemble
from tests.support.workers import attempt_rows, running_worker, wait_for_status

pytestmark = pytest.mark.timeout(60)

REPORT = [
    ["Quarterly report: revenue grew 12% on the new durable jobs product."],
    ["Risks: one large customer is 40% of revenue; the on-call rotation is thin."],
]


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(create_app(settings, jobs=app)) as url, http_client(url, timeout=30) as c:
        yield c


async def analyse(
    api: httpx.AsyncClient, pool: asyncpg.Pool, settings: Settings, document: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    """Run one analysis; the job as GET shows it, and what a follower reassembled."""
    created = await api.post("/api/jobs", json={"job": "document_analysis", "input": document})
    assert created.status_code == 202, created.text
    job_id = created.json()["id"]
    follower = asyncio.create_task(read_stream(api, created.json()["events_url"]))
    async with running_worker(settings, pool=pool, app=app):
        await wait_for_status(pool, uuid.UUID(job_id), "succeeded", timeout_s=30)
        frames = await follower
    job: dict[str, Any] = (await api.get(f"/api/jobs/{job_id}")).json()
    return job, reassemble(frames.events)


@pytest.mark.parametrize("form", ["text", "pdf"])
async def test_a_document_becomes_a_validated_analysis(
    pool: asyncpg.Pool, settings: Settings, api: httpx.AsyncClient, form: str
) -> None:
    if form == "text":
        document = {"title": "Q3", "text": "\n".join(line for page in REPORT for line in page)}
    else:
        pdf = base64.b64encode(pdf_with_text(REPORT)).decode()
        document = {"title": "Q3", "pdf_base64": pdf}
    job, followed = await analyse(api, pool, settings, document)
    output = job["result"]["output"]
    Analysis.model_validate(output)  # the saved output is an Analysis
    assert output["sentiment"] in ("positive", "neutral", "negative")
    # The follower saw the JSON grow into exactly the result's text, which is the answer.
    assert followed == job["result"]["text"]
    assert orjson.loads(job["result"]["text"]) == output
    progress = [e for e in (await _events(api, job["id"])) if e["type"] == "progress"]
    assert progress[0]["message"] == "reading the document"
    assert progress[-1]["fraction"] == 1.0
    # The extraction is a journaled step: what the PDF said is what the model was asked about.
    step = await eventually(
        lambda: pool.fetchrow(
            "SELECT result FROM job_steps WHERE job_id = $1 AND step = 'extract'",
            uuid.UUID(job["id"]),
        ),
        lambda row: row is not None,
        what="the extract step journaled",
    )
    assert step is not None and "revenue grew 12%" in step["result"]
    (attempt,) = await attempt_rows(pool, uuid.UUID(job["id"]))
    assert attempt["cost_known"] and attempt["cost_usd"] > 0
    assert await tenant_money(pool) == (Decimal(0), attempt["cost_usd"])


async def test_a_document_refused_at_create_or_unreadable_at_run(
    pool: asyncpg.Pool, settings: Settings, api: httpx.AsyncClient
) -> None:
    both = await api.post(
        "/api/jobs", json={"job": "document_analysis", "input": {"text": "a", "pdf_base64": "b"}}
    )
    assert both.status_code == 422
    assert "one of the two" in both.json()["errors"][0]["message"]
    broken = base64.b64encode(b"%PDF-1.4 this is not a PDF").decode()
    created = await api.post(
        "/api/jobs", json={"job": "document_analysis", "input": {"pdf_base64": broken}}
    )
    job_id = uuid.UUID(created.json()["id"])
    async with running_worker(settings, pool=pool, app=app):
        job = await wait_for_status(pool, job_id, "failed")
    assert job["error"]["class"] == "permanent" and "PDF" in job["error"]["message"]
    assert job["attempts"] == 1


async def _events(api: httpx.AsyncClient, job_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = (
        await api.get(f"/api/jobs/{job_id}/events", params={"after": 0})
    ).json()["events"]
    return events
