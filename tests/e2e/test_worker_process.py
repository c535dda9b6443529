"""Real `python -m worker` processes: graceful SIGTERM, a kill -9, and bad configuration."""

from __future__ import annotations

import uuid
from pathlib import Path

import asyncpg
import pytest

from tests.support.polling import eventually
from tests.support.processes import processes
from tests.support.workers import (
    attempt_rows,
    counted_text,
    create_job,
    event_list,
    job_row,
    reassemble,
    wait_for_status,
)

# Attempt 1 hangs after 20 tokens, as a provider that stopped answering, until the test stops
# its worker: a two-second stream left to chance could end before a busy machine's signal did.
# Attempt 2 streams the whole text, about two seconds.
STREAM = {
    "tokens": 80,
    "pattern": "count",
    "tokens_per_second": 40,
    "first_token_delay_s": 0,
    "faults": [{"attempt": 1, "after_tokens": 20, "kind": "timeout"}],
}


def worker_env(database_url: str, worker_id: str, **settings: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "JOBSTREAM_WORKER_ID": worker_id,
        "JOBSTREAM_POLL_INTERVAL_S": "0.1",
        **{f"JOBSTREAM_{name.upper()}": value for name, value in settings.items()},
    }


async def wait_for_streaming(pool: asyncpg.Pool, job_id: uuid.UUID) -> None:
    await eventually(
        lambda: event_list(pool, job_id),
        lambda log: any(e.type == "token" for e in log),
        what="the first worker streams tokens",
        timeout_s=15,
    )


async def test_sigterm_hands_the_job_back_at_once_and_another_worker_finishes_it(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    job_id = await create_job(pool, simulate=STREAM)
    with processes(tmp_path) as group:
        first = group.spawn("worker", worker_env(database_url, "first", shutdown_grace_s="0"))
        await wait_for_streaming(pool, job_id)
        first.terminate()
        assert await first.wait_async(10) == 0, first.output()
        # Back in the queue as soon as the process is gone: no waiting for the 30 s lease.
        job = await job_row(pool, job_id)
        assert (job["status"], job["lease_until"], job["uncounted_attempts"]) == ("queued", None, 1)
        (attempt,) = await attempt_rows(pool, job_id)
        assert attempt["outcome"] == "interrupted"
        assert {"signal_received", "attempt_handed_back", "worker_stopped"} <= {
            line.get("event") for line in first.log_events()
        }
        group.spawn("worker", worker_env(database_url, "second"))
        job = await wait_for_status(pool, job_id, "succeeded", timeout_s=15)
    first_attempt, second_attempt = await attempt_rows(pool, job_id)
    assert (first_attempt["worker_id"], first_attempt["outcome"]) == ("first", "interrupted")
    assert (second_attempt["worker_id"], second_attempt["outcome"]) == ("second", "succeeded")
    assert reassemble(await event_list(pool, job_id)) == job["result"]["text"] == counted_text(80)


async def test_after_kill_9_the_lease_expires_and_another_worker_finishes_the_job(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    job_id = await create_job(pool, simulate=STREAM)
    with processes(tmp_path) as group:
        first = group.spawn("worker", worker_env(database_url, "first", lease_s="2"))
        await wait_for_streaming(pool, job_id)
        first.kill()
        assert await first.wait_async(10) == -9
        # Nobody renews the lease now: this is when it runs out.
        lease_until = (await job_row(pool, job_id))["lease_until"]
        assert lease_until is not None
        group.spawn("worker", worker_env(database_url, "second", lease_s="2"))
        job = await wait_for_status(pool, job_id, "succeeded", timeout_s=15)
    first_attempt, second_attempt = await attempt_rows(pool, job_id)
    assert (first_attempt["worker_id"], first_attempt["outcome"]) == ("first", "lost")
    assert first_attempt["cost_known"] is False
    assert (second_attempt["worker_id"], second_attempt["outcome"]) == ("second", "succeeded")
    assert second_attempt["started_at"] >= lease_until
    log = await event_list(pool, job_id)
    assert [e.data["class"] for e in log if e.type == "attempt_error"] == ["lost"]
    assert reassemble(log) == job["result"]["text"] == counted_text(80)


@pytest.mark.parametrize("module", ["worker", "server"])
@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"DATABASE_URL": "postgresql://nobody@127.0.0.1:1/x", "JOBSTREAM_LEASE_S": "soon"},
            "JOBSTREAM_LEASE_S='soon'",
        ),
        ({}, "DATABASE_URL is not set"),
    ],
)
def test_bad_configuration_exits_2_with_one_clear_line(
    tmp_path: Path, module: str, env: dict[str, str], expected: str
) -> None:
    with processes(tmp_path) as group:
        process = group.spawn(module, env)
        assert process.wait(15) == 2
    (line,) = process.output().splitlines()
    assert expected in line and line.startswith(f"jobstream {module}: ")
    assert "Traceback" not in line
