"""What /admin/api answers, against a real database, a real uvicorn and a real worker: the
overview's counts equal a direct count and its series move; the jobs list filters, searches and
pages; a job's view, its actions, the dead letters, and the workers' states.

The server runs with keys off and no operator key, so this loopback client is the operator
(test_admin_auth.py holds the door).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from jobstream import admin_jobs, creates, workers
from jobstream.jobspec import JobSpec
from jobstream.server.app import create_app
from jobstream.settings import Settings
from jobstream.short_ids import short_id
from jobstream.worker.janitor import Janitor
from tests.support import dead_jobs
from tests.support.clock import ManualClock
from tests.support.http_server import http_client, serve
from tests.support.polling import eventually
from tests.support.workers import fast, running_worker, wait_for_status


async def _direct_counts(pool: asyncpg.Pool) -> dict[tuple[str, str, str], int]:
    rows = await pool.fetch(
        "SELECT job_name, tenant_id, status, count(*) AS n FROM jobs"
        " WHERE status IN ('queued', 'running', 'cancelling', 'failed', 'dead')"
        " GROUP BY 1, 2, 3"
    )
    return {(r["job_name"], r["tenant_id"], r["status"]): r["n"] for r in rows}


def _counts(overview: dict[str, Any]) -> dict[tuple[str, str, str], int]:
    return {(c["job_name"], c["tenant"], c["status"]): c["n"] for c in overview["counts"]}


async def test_the_overview_counts_equal_a_direct_count_and_its_series_move(
    settings: Settings, pool: asyncpg.Pool, client: httpx.AsyncClient
) -> None:
    # One clock for the janitor's folds and the dashboard's reads, two minutes ahead of the
    # database's: the attempts that end now are in minutes it has seen end (the fold of
    # attempt_minutes takes whole minutes). Jobs are made and run on the database's.
    clock = ManualClock(datetime.now(UTC) + timedelta(minutes=2))
    quiet = settings.replace(janitor=False)
    janitor = Janitor(pool, quiet, clock=clock)
    await janitor.run_round()  # the baseline: what happens next is the series' to show
    async with (
        serve(create_app(quiet, clock=clock)) as url,
        http_client(url, timeout=30) as admin,
        running_worker(quiet),
    ):
        made = []
        for body in [
            {"prompt": "ok", "simulate": fast(5)},
            {"prompt": "ok", "simulate": fast(3)},
            {"prompt": "no", "max_attempts": 1, "simulate": fast(3, faults=[
                {"attempt": 1, "after_tokens": 1, "kind": "permanent"}])},
            {"prompt": "later", "delay_s": 3600},
        ]:  # fmt: skip
            created = await client.post("/api/jobs", json=body)
            assert created.status_code == 202, created.text
            made.append(uuid.UUID(created.json()["id"]))
        await wait_for_status(pool, made[0], "succeeded")
        await wait_for_status(pool, made[1], "succeeded")
        await wait_for_status(pool, made[2], "failed")
        clock.advance(60)  # the next minute: the one before is whole
        await janitor.run_round()

        overview = (await admin.get("/admin/api/overview")).json()
        assert _counts(overview) == await _direct_counts(pool)
        [queued] = [c for c in overview["counts"] if c["status"] == "queued"]
        assert queued["scheduled"] == 1  # the delayed job: queued, not due
        hour = overview["series"]
        assert len(hour["minutes"]) == 60
        assert all(len(hour[name]) == 60 for name in hour)
        assert (sum(hour["created"]), sum(hour["succeeded"]), sum(hour["failed"])) == (4, 2, 1)
        runs = [p for p in hour["run_p50_s"] if p is not None]
        assert runs and all(0 <= p <= 600 for p in runs)
        waits = [p for p in hour["queue_wait_p95_s"] if p is not None]
        assert waits and all(0 <= p <= 600 for p in waits)
        spent = {(s["tenant"], s["job_name"]): s["usd"] for s in overview["spend"]["hour"]}
        assert spent[("default", "llm")] > 0
        assert overview["spend"]["day"][0]["usd"] >= spent[("default", "llm")]
        [simulated] = [p for p in overview["providers"] if p["name"] == "simulated"]
        assert simulated == {"name": "simulated", "in_use": 0, "limit": None, "paused_until": None}


async def test_the_jobs_list_filters_searches_and_pages_newest_first(
    client: httpx.AsyncClient, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobstream import tenants

    await tenants.create(pool, "tenant-b")
    ids: list[str] = []
    for i in range(12):
        body = {"prompt": f"job {i}", "delay_s": 3600, "metadata": {"order": f"po-{i:03}"}}
        made = await client.post("/api/jobs", json=body, headers={"Idempotency-Key": f"key-{i}"})
        ids.append(made.json()["id"])
    other = await creates.create(
        pool, "tenant-b", JobSpec(prompt="b", provider="simulated", delay_s=3600), "b-key"
    )
    newest_first = sorted([*ids, str(other.job.id)], reverse=True)

    async def listed(query: str) -> dict[str, Any]:
        answer = await client.get(f"/admin/api/jobs?{query}")
        assert answer.status_code == 200, answer.text
        page: dict[str, Any] = answer.json()
        return page

    everything = await listed("limit=200")
    assert [j["id"] for j in everything["jobs"]] == newest_first
    assert everything["next_cursor"] is None
    row = everything["jobs"][-1]
    assert row["short_id"] == short_id(row["id"]) == row["id"][-8:]
    assert (await listed("tenant=tenant-b"))["jobs"][0]["id"] == str(other.job.id)
    assert len((await listed("status=queued&job=llm&tenant=default"))["jobs"]) == 12
    assert (await listed("status=succeeded,dead"))["jobs"] == []
    for q in [ids[3][-8:], ids[3], "key-3", "PO-003"]:
        assert [j["id"] for j in (await listed(f"q={q}"))["jobs"]] == [ids[3]], q

    oldest = everything["jobs"][-1]["created_at"]
    since = await client.get("/admin/api/jobs", params={"since": oldest})
    assert oldest in [j["created_at"] for j in since.json()["jobs"]]
    until = await client.get("/admin/api/jobs", params={"until": oldest})
    assert until.json()["jobs"] == []
    # Pages of 5, then with a window of 4 ids a page (short pages that go on): every job once,
    # in order, whatever the page breaks.
    for window in (admin_jobs.WINDOW, 4):
        monkeypatch.setattr(admin_jobs, "WINDOW", window)
        seen: list[str] = []
        cursor = ""
        while True:
            page = await listed(f"limit=5&job=llm&cursor={cursor}")
            assert len(page["jobs"]) <= 5
            seen += [j["id"] for j in page["jobs"]]
            if page["next_cursor"] is None:
                break
            cursor = page["next_cursor"]
        assert seen == newest_first, window

    for bad in ["status=nope", "limit=0", "limit=201", "cursor=x", "since=yesterday", "q=%00"]:
        refused = await client.get(f"/admin/api/jobs?{bad}")
        assert refused.status_code == 400, bad
    # The ends of time: no job, and no 500.
    for edge in ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "1900-01-01"]:
        for name in ("since", "until"):
            answer = await client.get("/admin/api/jobs", params={name: edge})
            assert answer.status_code in (200, 400), (name, edge, answer.text)


async def test_a_job_view_its_actions_and_the_dead_letters(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    made = await client.post("/api/jobs", json=dead_jobs.delayed(3))
    dead_id = made.json()["id"]
    await dead_jobs.die(pool, uuid.UUID(dead_id), ["0 ", "1 ", "2 "])

    view = (await client.get(f"/admin/api/jobs/{dead_id}")).json()
    assert view["job"]["status"] == "dead" and view["job"]["tenant"] == "default"
    assert view["job"]["short_id"] == dead_id[-8:]
    assert view["job"]["payload"]["max_tokens"] == 3
    assert view["text"] == "0 1 2 "
    [attempt] = view["attempts"]
    assert attempt["worker_id"] == "test-dying" and attempt["outcome"] == "failed"
    assert attempt["error_class"] == dead_jobs.DEATH["class"]
    types = [e["type"] for e in view["events"]]
    assert types[:3] == ["status", "reset", "status"] and types[-1] == "done"
    [tokens] = [e for e in view["events"] if e["type"] == "token"]
    assert tokens["data"]["chars"] == len("0 1 2 ")
    followed = await client.get(
        f"/api/jobs/{dead_id}/events", params={"token": view["events_token"], "after": 0}
    )
    assert followed.status_code == 200 and followed.json()["done"] is True

    groups = (await client.get("/admin/api/dead")).json()["groups"]
    [group] = [g for g in groups if g["error_class"] == dead_jobs.DEATH["class"]]
    assert group["message"] == dead_jobs.DEATH["message"] and dead_id in group["job_ids"]

    retried = await client.post(f"/admin/api/jobs/{dead_id}/retry")
    assert retried.status_code == 202, retried.text
    retry_id = retried.json()["job_id"]
    again = await client.post(f"/admin/api/jobs/{dead_id}/retry")
    assert again.status_code == 200 and again.json()["job_id"] == retry_id
    public = (await client.get(f"/api/jobs/{dead_id}")).json()
    assert public["retried_as"] == retry_id

    unknown = str(uuid.uuid4())
    bulk = await client.post("/admin/api/dead/retry", json={"ids": [dead_id, unknown, retry_id]})
    assert bulk.status_code == 200, bulk.text
    assert bulk.json()["retried"] == [{"from": dead_id, "to": retry_id}]
    assert {r["id"] for r in bulk.json()["refused"]} == {unknown, retry_id}

    cancelled = await client.post(f"/admin/api/jobs/{retry_id}/cancel")
    assert cancelled.status_code == 202, cancelled.text
    assert (await client.get(f"/api/jobs/{retry_id}")).json()["status"] == "cancelled"
    for body in [{}, {"ids": []}, {"ids": ["nope"]}, {"ids": [1]}]:
        assert (await client.post("/admin/api/dead/retry", json=body)).status_code == 422


async def test_workers_show_their_running_jobs_and_turn_stale_then_stopped(
    settings: Settings, pool: asyncpg.Pool, client: httpx.AsyncClient
) -> None:
    # A worker that beat long ago (killed, its row left behind): stale.
    gone = workers.WorkerProcess("gone:1", "elsewhere", 1, "0.1", ("llm",), 4)
    await workers.register(pool, gone, ManualClock(datetime.now(UTC) - timedelta(minutes=5)))
    slow = {"prompt": "slow", "simulate": {"tokens": 200, "tokens_per_second": 20}}
    async with running_worker(settings.replace(janitor=False)) as worker:
        job_id = (await client.post("/api/jobs", json=slow)).json()["id"]

        async def fleet() -> dict[str, Any]:
            answer: dict[str, Any] = (await client.get("/admin/api/workers")).json()
            return answer

        def runs_the_job(answer: dict[str, Any]) -> bool:
            return any(
                w["id"] == worker.worker_id and [r["job_id"] for r in w["running"]] == [job_id]
                for w in answer["workers"]
            )

        seen = await eventually(fleet, runs_the_job, what="the worker runs the job")
        by_id = {w["id"]: w for w in seen["workers"]}
        assert by_id[worker.worker_id]["state"] == "live"
        assert by_id[worker.worker_id]["running"][0]["short_id"] == job_id[-8:]
        assert by_id["gone:1"]["state"] == "stale" and by_id["gone:1"]["running"] == []
        assert seen["heartbeat_window_s"] == settings.worker_stale_after_s == 20.0
        await client.post(f"/api/jobs/{job_id}/cancel")
    after = {w["id"]: w for w in (await client.get("/admin/api/workers")).json()["workers"]}
    assert after[worker.worker_id]["state"] == "stopped"
