"""`make chaos`: the chaos test at length, and its figures.

    .venv/bin/python -m tests.e2e.chaos [--seconds S] [--jobs N] [--compact-after S] [--seed X]

Three workers, one killed with -9 every ~2 s (and replaced); two servers, one killed and restarted
every ~10 s; the embedded PostgreSQL crashed (`pg_ctl -m immediate`) and restarted every ~25 s;
jobs created through the servers the whole time, each followed over SSE by two readers that
reconnect (one also hangs up on purpose), and read again from the start once finished; the
janitor compacts each job's log --compact-after seconds after it ends. Then
tests/support/chaos.py checks every job, follower and process. Logs land in test-output/chaos/.
Exits 1 when a promise was broken.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys

from tests.support import database
from tests.support.chaos import Chaos
from tests.support.chaos_plan import Figures, Plan
from tests.support.processes import REPO_ROOT, processes

OUTPUT = REPO_ROOT / "test-output" / "chaos"
# Logs compacted a minute after their job ends (the product's default is 5 minutes): within the
# run, so that followers and late readers meet logs as written and as compacted.
FULL = Plan(duration_s=150, jobs=300, compact_after_s=60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.chaos", description=__doc__)
    parser.add_argument("--seconds", type=float, default=FULL.duration_s)
    parser.add_argument("--jobs", type=int, default=FULL.jobs)
    parser.add_argument(
        "--compact-after", type=float, default=FULL.compact_after_s, metavar="S",
        help=f"JOBSTREAM_COMPACT_AFTER_S for the workers (default {FULL.compact_after_s:.0f}):"
        " below --seconds, jobs' logs are compacted during the run",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=random.randrange(2**32))
    args = parser.parse_args(argv)
    plan = Plan(duration_s=args.seconds, jobs=args.jobs, compact_after_s=args.compact_after)
    figures = asyncio.run(_run(plan, args.seed))
    print("== make chaos: figures ==")
    print(figures.summary())
    print(f"seed:               {args.seed}")
    print(f"logs:               {OUTPUT}")
    return 0 if not figures.problems else 1


async def _run(plan: Plan, seed: int) -> Figures:
    shutil.rmtree(OUTPUT, ignore_errors=True)
    OUTPUT.mkdir(parents=True)
    with database.postgres_server() as (admin_url, postgres):
        if postgres is None:
            raise SystemExit("make chaos restarts PostgreSQL: unset DATABASE_URL (embedded server)")
        await database.create_template(admin_url)
        database_url = await database.create_test_database(admin_url)
        with processes(OUTPUT) as group:
            return await Chaos(plan, group, postgres, database_url, random.Random(seed)).run()


if __name__ == "__main__":
    sys.exit(main())
