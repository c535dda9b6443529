"""Bad input found by probing from outside: each was a 500, and is now a clear 4xx that stores
nothing (issue 9, defect 5 and the smaller ones of 11)."""

from __future__ import annotations

import base64
from typing import Any

import asyncpg
import httpx

from tests.support.api import PROBLEM, job_count


def body(**fields: Any) -> dict[str, Any]:
    return {"prompt": "p", "simulate": {"tokens": 2}, **fields}


def nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


async def test_nul_anywhere_postgresql_would_store_it_is_a_422_naming_the_field(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    cases = {
        "prompt": body(prompt="a\x00b"),
        "model": body(model="m\x00"),
        "webhook_url": body(webhook_url="https://example.com/\x00"),
        "metadata": body(metadata={"k": "v\x00"}),
    }
    cases["metadata "] = body(metadata={"k\x00": 1})  # a key, not a value
    for field, bad in cases.items():
        response = await client.post("/api/jobs", json=bad)
        assert response.status_code == 422, (field, response.text)
        assert response.headers["content-type"] == PROBLEM
        assert [e["field"] for e in response.json()["errors"]] == [field.strip()]
    assert await job_count(pool) == 0


async def test_metadata_nested_deeper_than_can_be_written_back_is_a_422(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    # orjson reads 1,024 levels but writes 254: the store (or the answer) failed after the read.
    for levels in (300, 1000):
        # Written by hand: the JSON encoder httpx uses stops near 1,000 levels itself.
        metadata = '{"a": ' * levels + "{}" + "}" * levels
        raw = f'{{"prompt": "p", "metadata": {metadata}}}'.encode()
        response = await client.post(
            "/api/jobs", content=raw, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 422
        assert response.json()["errors"][0]["field"] == "metadata"
    ok = await client.post("/api/jobs", json=body(metadata=nested(10)))
    assert ok.status_code == 202
    assert await job_count(pool) == 1


async def test_unicode_digits_and_huge_numbers_in_queries_and_tokens_are_4xx(
    client: httpx.AsyncClient,
) -> None:
    job = (await client.post("/api/jobs", json=body())).json()
    events = f"/api/jobs/{job['id']}/events"
    huge = "9" * 5000  # past Python's 4,300-digit int conversion limit
    answers = [
        await client.get(events, params={"token": "\u00b2.x"}),  # '²'.isdigit() is true
        await client.get(events, params={"token": "123.\u00e9"}),  # compare_digest on non-ASCII
        await client.get(events, params={"after": huge}),
        await client.get(events, params={"after": "\u00b2"}),
        await client.get(events, headers={"Last-Event-ID": huge, "Accept": "text/event-stream"}),
        await client.get("/api/jobs", params={"limit": "\u00b2"}),
        await client.get("/api/jobs", params={"limit": huge}),
    ]
    assert [r.status_code for r in answers] == [404, 404, 400, 400, 400, 400, 400]
    assert all(r.headers["content-type"] == PROBLEM for r in answers)


async def test_a_list_cursor_past_a_timestamps_range_is_a_400(client: httpx.AsyncClient) -> None:
    for created_at in ("0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"):
        raw = f"{created_at}|00000000-0000-0000-0000-000000000000".encode()
        cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        response = await client.get("/api/jobs", params={"cursor": cursor})
        assert response.status_code == 400, created_at


async def test_media_types_are_case_insensitive(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/api/jobs", content=b'{"prompt": "p"}', headers={"Content-Type": "APPLICATION/JSON"}
    )
    assert response.status_code == 202


async def test_a_404_does_not_echo_a_long_job_id(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/jobs/" + "x" * 20_000)
    assert response.status_code == 404
    assert len(response.content) < 400


async def test_a_method_not_allowed_names_every_method_the_path_allows(
    client: httpx.AsyncClient,
) -> None:
    # Found by the fuzz test: /api/jobs was two routes, and a 405 named only the first's method
    # (`Allow: POST`), though GET is allowed too (RFC 9110 §15.5.6).
    response = await client.delete("/api/jobs")
    assert response.status_code == 405
    assert response.headers["content-type"] == PROBLEM
    assert {m.strip() for m in response.headers["allow"].split(",")} == {"GET", "HEAD", "POST"}
