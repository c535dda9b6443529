"""`make fuzz`: the fuzz test's run at length, 10,000+ cases, and its figures.

    .venv/bin/python -m tests.e2e.fuzz [--max-examples N] [--seed S] [--workers W]

A PostgreSQL (embedded, or DATABASE_URL's server: it must allow CREATE DATABASE), a server that
requires API keys and a worker as real processes, and schemathesis with every check of
tests/e2e/schemathesis.toml. The report, the CLI's output and the processes' logs land in
test-output/fuzz/. Exits 1 when anything failed.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time
from collections.abc import Sequence

from tests.support import database
from tests.support.fuzzing import FuzzReport, run_schemathesis, target
from tests.support.processes import REPO_ROOT, processes

OUTPUT = REPO_ROOT / "test-output" / "fuzz"
# Cases per operation in the fuzzing phase: with the coverage and stateful phases, 12,427 cases
# (measured with 17 operations: 812 s on two cores that other work kept busy; ~6 min on idle ones).
MAX_EXAMPLES = 800


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.fuzz", description=__doc__)
    parser.add_argument("--max-examples", type=int, default=MAX_EXAMPLES)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--workers", type=int, default=1, help="schemathesis's concurrent clients")
    args = parser.parse_args(argv)
    return asyncio.run(_run(args.max_examples, args.seed, args.workers))


async def _run(max_examples: int, seed: int | None, workers: int) -> int:
    shutil.rmtree(OUTPUT, ignore_errors=True)
    OUTPUT.mkdir(parents=True)
    with database.postgres_server() as (admin_url, _):
        await database.create_template(admin_url)
        database_url = await database.create_test_database(admin_url)
        with processes(OUTPUT) as group:
            async with target(group, database_url) as api:
                started = time.monotonic()
                report = await run_schemathesis(
                    api, OUTPUT, max_examples=max_examples, seed=seed, workers=workers,
                    timeout_s=4 * 3600,
                )  # fmt: skip
                elapsed_s = time.monotonic() - started
                exits = {"server": api.server.returncode, "worker": api.worker.returncode}
            logged = api.server.errors_logged() + api.worker.errors_logged()
    _print(report, elapsed_s, logged, exits)
    clean = report.clean and not logged and exits == {"server": None, "worker": None}
    return 0 if clean else 1


def _print(
    report: FuzzReport, elapsed_s: float, logged: Sequence[str], exits: dict[str, int | None]
) -> None:
    print(report.output)
    print("== make fuzz: figures ==")
    print(f"cases run:            {report.cases:,}")
    print(
        f"failing cases:        {report.failing_cases} ({report.unique_failures} unique failures)"
    )
    print(f"errored cases:        {report.errored}")
    print(f"error lines logged:   {len(logged)} (server and worker)")
    for line in logged[:20]:
        print(f"  - {line}")
    print(f"processes exited:     {[name for name, code in exits.items() if code is not None]}")
    print(f"time:                 {elapsed_s:.0f} s ({report.cases / elapsed_s:.0f} cases/s)")
    print(f"seed:                 {report.seed}")
    print(f"report:               {OUTPUT}")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
