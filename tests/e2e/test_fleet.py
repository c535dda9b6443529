"""The fleet test's short form (`make fleet` is the long one, tests/e2e/fleet.py): PgBouncer,
nginx in front of two `jobstream server` processes, three `jobstream worker` processes; one
server and one worker restarted under jobs followed through nginx, and no client sees an error.
PostgreSQL is not restarted here: the suite's other tests share it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.support import nginx, pgbouncer
from tests.support.fleet_plan import Plan
from tests.support.fleet_run import FleetRun
from tests.support.processes import Processes

SHORT = Plan(
    jobs=60,
    followers=10,
    create_over_s=6,
    warm_up_s=1.5,
    servers_rolled=1,
    workers_rolled=1,
    restart_postgres=False,
    settle_timeout_s=60,
)


async def test_a_rolling_restart_behind_nginx_and_pgbouncer_loses_nothing(
    process_group: Processes, database_url: str, tmp_path: Path
) -> None:
    for reason in (pgbouncer.missing(), nginx.missing()):
        if reason:
            pytest.skip(reason)
    async with pgbouncer.pgbouncer(database_url) as pooled_url:
        run = FleetRun(
            SHORT, process_group, None, database_url, pooled_url, tmp_path / "nginx",
            random.Random(),
        )  # fmt: skip
        figures = await run.run()
    assert figures.problems == [], figures.summary()
    assert (figures.jobs, figures.lost, figures.doubled) == (60, 0, 0), figures.summary()
    assert figures.followers_exact == 10, figures.summary()
    assert sum(figures.errors.values()) == 0, figures.summary()
