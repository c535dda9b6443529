"""POST /api/jobs/batch: many creates in one request, each answered as a single create would be."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import httpx
import pytest

from jobstream import creates
from jobstream.server.batch_api import CHUNK, TAIL

PROBLEM_TYPES = {"budget": "/problems/budget-exhausted", "rate": "/problems/rate-limited"}


def job(prompt: str, key: str | None = None, **fields: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"prompt": prompt, "simulate": {"tokens": 3}, **fields}
    if key is not None:
        item["idempotency_key"] = key
    return item


async def batch(client: httpx.AsyncClient, *items: Any) -> list[dict[str, Any]]:
    response = await client.post("/api/jobs/batch", json={"jobs": list(items)})
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    assert len(results) == len(items)
    return results


async def test_a_bad_item_refuses_itself_and_the_others_are_created_in_order(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    results = await batch(
        client, job("first"), job("", max_tokens=0), "not an object", job("last", key="k")
    )
    first, bad, not_object, last = results
    assert first["status"] == "queued" and first["replayed"] is False
    assert bad["status"] == 422
    assert {e["field"] for e in bad["errors"]} == {"prompt", "max_tokens"}
    assert not_object["status"] == 422
    assert last["status"] == "queued"
    rows = await pool.fetch("SELECT id, payload->>'prompt' AS prompt FROM jobs ORDER BY created_at")
    assert {str(r["id"]): r["prompt"] for r in rows} == {first["id"]: "first", last["id"]: "last"}
    # Each made job reads as any other, its first event written.
    got = await client.get(last["poll_url"])
    assert got.json()["last_seq"] == 1 and got.json()["prompt"] == "last"


async def test_a_batch_of_several_chunks_answers_every_item_in_its_place(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    count = 2 * CHUNK + 7  # three statements: a chunk, a short one, and the last TAIL items
    items: list[Any] = [job(f"p{i}", key=f"c{i}") for i in range(count)]
    # At the ends of chunks and of the tail: the valid ones shift.
    bad = {0, CHUNK - 1, CHUNK, count - TAIL - 1, count - TAIL, count - 1}
    for i in bad:
        items[i] = job("", max_tokens=0)
    items[CHUNK + 3] = job("p1", key="c1")  # the second chunk repeats an item of the first
    results = await batch(client, *items)
    rows = await pool.fetch("SELECT id, payload->>'prompt' AS prompt FROM jobs")
    made = {str(r["id"]): r["prompt"] for r in rows}
    for i, result in enumerate(results):
        if i in bad:
            assert result["status"] == 422, i
        elif i == CHUNK + 3:
            assert result["replayed"] is True and result["id"] == results[1]["id"]
        else:
            assert result["replayed"] is False and made[result["id"]] == f"p{i}", i
    assert len(made) == count - len(bad) - 1


async def test_replays_conflicts_and_duplicates_within_a_batch(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    first = await batch(client, job("a", key="ka"), job("b", key="kb"))
    again = await batch(
        client,
        job("a", key="ka"),  # the same body: the same job
        job("changed", key="kb"),  # another body under a used key
        job("c", key="kc"),
        job("c", key="kc"),  # twice in one batch: one job
        job("d", key="kc"),  # and a third time with another body
    )
    assert again[0]["id"] == first[0]["id"] and again[0]["replayed"] is True
    assert again[1]["status"] == 409 and again[1]["type"] == "/problems/idempotency-conflict"
    assert again[2]["replayed"] is False and again[3]["replayed"] is True
    assert again[3]["id"] == again[2]["id"]
    assert again[4]["status"] == 409
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 3


async def test_concurrent_duplicate_batches_make_each_job_once(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    items = [job(f"p{i}", key=f"dup-{i}") for i in range(50)]
    answers = await asyncio.gather(*(batch(client, *items) for _ in range(8)))
    for i in range(50):
        assert len({answer[i]["id"] for answer in answers}) == 1
        assert sum(not answer[i]["replayed"] for answer in answers) == 1
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 50
    assert await pool.fetchval("SELECT count(*) FROM job_log") == 50


async def test_budget_and_rate_refuse_the_items_past_them_and_not_replays(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    # 100 tokens at the simulator's default price reserve 0.0002 USD: the budget holds two.
    await pool.execute("UPDATE tenants SET budget_usd = 0.0005 WHERE id = 'default'")
    made = await batch(client, *(job(f"b{i}", key=f"b{i}", max_tokens=100) for i in range(4)))
    assert [r["status"] for r in made] == ["queued", "queued", 402, 402]
    assert made[2]["type"] == PROBLEM_TYPES["budget"]
    balance = await pool.fetchval("SELECT reserved_usd FROM tenant_balances")
    assert str(balance) == "0.00040000"
    await pool.execute("UPDATE tenants SET budget_usd = NULL, create_rate_per_min = 3")
    rated = await batch(
        client, job("b0", key="b0", max_tokens=100), *(job(f"r{i}") for i in range(3))
    )
    assert rated[0]["replayed"] is True  # a replay is no new create: not counted
    assert [r["status"] for r in rated[1:]] == ["queued", 429, 429]
    assert rated[2]["type"] == PROBLEM_TYPES["rate"]
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 3
    # Keyed items are written in key order, yet the budget goes to the first in the request.
    await pool.execute(
        "UPDATE tenants SET create_rate_per_min = NULL,"
        " budget_usd = (SELECT reserved_usd FROM tenant_balances) + 0.0003"
    )  # room for one more
    ordered = await batch(
        client, *(job(f"o{i}", key=f"o{9 - i}", max_tokens=100) for i in range(3)), job("plain")
    )
    assert [r["status"] for r in ordered] == ["queued", 402, 402, 402]


async def test_the_batch_itself_must_be_a_list_of_1_to_1000_jobs(
    client: httpx.AsyncClient,
) -> None:
    bodies: list[dict[str, Any]] = [
        {"jobs": []}, {"jobs": [job("x")] * 1001}, {"jobs": {}}, {"items": [job("x")]},
    ]  # fmt: skip
    for bad in bodies:
        response = await client.post("/api/jobs/batch", json=bad)
        assert response.status_code == 422, bad
        assert response.json()["errors"][0]["field"] == "jobs"


async def test_batches_with_the_same_keys_in_opposite_orders_both_succeed(
    client: httpx.AsyncClient, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Written in request order, each batch's first chunk took keys the other's second chunk
    # needed: PostgreSQL aborted one, and its tries could all end so (a 500 in CI). Written in
    # key order, one waits for the other: no second try is needed.
    monkeypatch.setattr(creates, "BATCH_TRIES", 1)
    count = CHUNK + 50
    forward = [job(f"p{i}", key=f"both-{i}") for i in range(count)]
    answers = await asyncio.gather(batch(client, *forward), batch(client, *forward[::-1]))
    first, second = answers[0], answers[1][::-1]
    for i in range(count):
        assert first[i]["id"] == second[i]["id"], i
        assert first[i]["replayed"] is not second[i]["replayed"], i
    assert await pool.fetchval("SELECT count(*) FROM jobs") == count
