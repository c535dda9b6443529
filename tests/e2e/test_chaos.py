"""A short chaos run (tests/support/chaos.py): workers killed with -9 every ~2 s, a server killed
and restarted, PostgreSQL crashed and restarted, under jobs that followers read across all of it.
Every job ends, with one accepted result, and every follower's text is that result; the janitor
compacts finished jobs' logs 2 s after their end, so followers meet logs as written and compacted.
`make chaos` runs the same for minutes (tests/e2e/chaos.py).
"""

from __future__ import annotations

import random

from jobstream.embedded_pg import EmbeddedPostgres
from tests.support.chaos import Chaos
from tests.support.chaos_plan import Plan
from tests.support.processes import Processes

SHORT = Plan(
    duration_s=14,
    jobs=16,
    worker_kill_every_s=2,
    server_restart_every_s=5,
    postgres_restart_every_s=8,
    settle_timeout_s=45,
    # Jobs' logs are compacted during the run, and followers and late readers read them so.
    compact_after_s=2,
)


async def test_jobs_and_followers_survive_kills_and_restarts_of_everything(
    process_group: Processes,
    embedded_postgres: EmbeddedPostgres,
    database_url: str,
) -> None:
    seed = random.randrange(2**32)
    figures = await Chaos(
        SHORT, process_group, embedded_postgres, database_url, random.Random(seed)
    ).run()
    report = f"seed {seed}\n{figures.summary()}"
    assert figures.problems == [], report
    assert figures.jobs == SHORT.jobs, report
    # The faults happened: a run that skipped them would prove nothing.
    assert figures.worker_kills >= 4, report
    assert figures.server_restarts >= 1, report
    assert figures.postgres_restarts >= 1, report
    assert figures.logs_compacted >= 1, report
    print(report)  # shown with -s, and in a failing run's captured output
