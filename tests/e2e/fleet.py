"""`make fleet`: the fleet test at full size, and its figures.

    .venv/bin/python -m tests.e2e.fleet [--jobs N] [--followers N] [--seconds S] [--seed X]

PostgreSQL, PgBouncer in transaction mode, nginx in front of two `jobstream server` processes,
three `jobstream worker` processes, all on loopback; 1,000 jobs created through nginx, 100 of
them followed over SSE; each server, then each worker restarted in turn (a rolling deploy),
then PostgreSQL. tests/support/fleet_run.py does it and checks every job and follower. Logs land
in test-output/fleet/. Exits 1 when a promise was broken.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys

from tests.support import database, nginx, pgbouncer
from tests.support.fleet_plan import Figures, Plan
from tests.support.fleet_run import FleetRun
from tests.support.processes import REPO_ROOT, processes

OUTPUT = REPO_ROOT / "test-output" / "fleet"
FULL = Plan()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.fleet", description=__doc__)
    parser.add_argument("--jobs", type=int, default=FULL.jobs)
    parser.add_argument("--followers", type=int, default=FULL.followers)
    parser.add_argument("--seconds", type=float, default=FULL.create_over_s,
                        help="the creates are spread over this long")  # fmt: skip
    parser.add_argument("--seed", type=int, default=random.randrange(2**32))
    args = parser.parse_args(argv)
    for reason in (pgbouncer.missing(), nginx.missing()):
        if reason:
            raise SystemExit(f"make fleet: {reason}")
    plan = Plan(jobs=args.jobs, followers=args.followers, create_over_s=args.seconds)
    figures = asyncio.run(run(plan, random.Random(args.seed)))
    print("== make fleet: figures ==")
    print(figures.summary())
    print(f"seed:               {args.seed}")
    print(f"logs:               {OUTPUT}")
    return 0 if not figures.problems else 1


async def run(plan: Plan, rng: random.Random) -> Figures:
    shutil.rmtree(OUTPUT, ignore_errors=True)
    OUTPUT.mkdir(parents=True)
    with database.postgres_server() as (admin_url, postgres):
        if postgres is None:
            raise SystemExit("make fleet restarts PostgreSQL: unset DATABASE_URL (embedded server)")
        await database.create_template(admin_url)
        direct_url = await database.create_test_database(admin_url)
        async with pgbouncer.pgbouncer(direct_url) as pooled_url:
            with processes(OUTPUT) as group:
                fleet = FleetRun(
                    plan, group, postgres, direct_url, pooled_url, OUTPUT / "nginx", rng
                )
                return await fleet.run()


if __name__ == "__main__":
    sys.exit(main())
