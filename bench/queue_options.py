"""bench.queue_side_by_side's command line: the scenarios to run and their sizes."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from bench.pgqueuer_side import Shape

SCENARIOS = ("drain", "steady", "enqueue", "claim")


@dataclass(frozen=True)
class Options:
    repeats: int
    drain_jobs: int
    drain_concurrency: int
    steady_s: float
    steady_rate: float
    steady_backlogs: tuple[int, ...]
    producers: int
    producer_batch: int
    steady_via: str
    consumers: int
    enqueue_requests: int
    enqueue_callers: int
    batch_requests: int
    batch_size: int
    claim_backlogs: tuple[int, ...]
    claims: int
    pgq: Shape
    scenarios: tuple[str, ...]
    out: Path | None
    via_pgbouncer: bool


def parse_args(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.queue_side_by_side",
        description="jobstream's queue against PgQueuer 1.6.0 on one PostgreSQL.",
    )
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 1 repeat, 2,000-job drain, 5 s steady state, fewer"
                        " requests and claims, 10,000 jobs as the large backlog")  # fmt: skip
    parser.add_argument("--repeats", type=int, help="default 3 (quick: 1)")
    parser.add_argument("--drain-jobs", type=int, help="default 20000 (quick: 2000)")
    parser.add_argument("--drain-concurrency", type=int, default=256,
                        help="jobstream attempts per worker process (default 256)")  # fmt: skip
    parser.add_argument("--steady-s", type=float, help="default 30 (quick: 5)")
    parser.add_argument("--steady-rate", type=float, default=0,
                        help="jobs/s the producers offer in all; 0 (default): as fast as they"
                        " can")  # fmt: skip
    parser.add_argument("--steady-backlogs", default="2000,0",
                        help="the steady states to run: the producers held while this many jobs"
                        " are unfinished, or 0, never held (the queue grows by what the"
                        " consumers cannot take); default 2000,0")  # fmt: skip
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--producer-batch", type=int, default=100)
    parser.add_argument("--steady-via", choices=("library", "http"), default="library",
                        help="how jobstream's steady-state producers create: creates.create_many,"
                        " like PgQueuer's Queries.enqueue (default), or POST /api/jobs/batch"
                        " through a server process on the same machine")  # fmt: skip
    parser.add_argument("--steady-consumers", type=int, default=1,
                        help="consumer processes in the steady state, each side")  # fmt: skip
    parser.add_argument("--enqueue-requests", type=int,
                        help="single-job calls per number of callers; default 1000"
                        " (quick: 300)")  # fmt: skip
    parser.add_argument("--enqueue-callers", type=int, default=32)
    parser.add_argument("--batch-requests", type=int, help="calls of --batch-size jobs;"
                        " default 40 (quick: 4)")  # fmt: skip
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--claim-backlogs", help="default 1000,100000 (quick: 1000,10000)")
    parser.add_argument("--claims", type=int, help="timed claims each; default 200 (quick: 50)")
    parser.add_argument("--pgq-consumers", type=int, default=5,
                        help="PgQueuer instances per consumer process (default 5)")  # fmt: skip
    parser.add_argument("--pgq-batch", type=int, default=50,
                        help="PgQueuer's dequeue batch_size (default 50)")  # fmt: skip
    parser.add_argument("--only", default=",".join(SCENARIOS),
                        help=f"scenarios to run, of {','.join(SCENARIOS)}")  # fmt: skip
    parser.add_argument("--out", type=Path, help="also write the summary table to this file")
    parser.add_argument("--via-pgbouncer", action="store_true",
                        help="instead of PgQueuer: jobstream's drain and create rows with its"
                        " pools direct and through PgBouncer in transaction mode, side by side"
                        " (needs /usr/sbin/pgbouncer: make pgbouncer)")  # fmt: skip
    args = parser.parse_args(argv)
    quick = args.quick

    def pick(value: int | float | None, full: int | float, smoke: int | float) -> float:
        return float(value if value is not None else smoke if quick else full)

    scenarios = tuple(s.strip() for s in args.only.split(",") if s.strip())
    if unknown := set(scenarios) - set(SCENARIOS):
        parser.error(f"--only: unknown scenario(s) {', '.join(sorted(unknown))}")
    backlogs = args.claim_backlogs or ("1000,10000" if quick else "1000,100000")
    return Options(
        repeats=int(pick(args.repeats, 3, 1)),
        drain_jobs=int(pick(args.drain_jobs, 20_000, 2_000)),
        drain_concurrency=args.drain_concurrency,
        steady_s=pick(args.steady_s, 30, 5),
        steady_rate=args.steady_rate,
        steady_backlogs=tuple(int(b) for b in args.steady_backlogs.split(",")),
        producers=args.producers,
        producer_batch=args.producer_batch,
        steady_via=args.steady_via,
        consumers=args.steady_consumers,
        enqueue_requests=int(pick(args.enqueue_requests, 1000, 300)),
        enqueue_callers=args.enqueue_callers,
        batch_requests=int(pick(args.batch_requests, 40, 4)),
        batch_size=args.batch_size,
        claim_backlogs=tuple(int(b) for b in backlogs.split(",")),
        claims=int(pick(args.claims, 200, 50)),
        pgq=Shape(args.pgq_consumers, args.pgq_batch),
        scenarios=scenarios,
        out=args.out,
        via_pgbouncer=args.via_pgbouncer,
    )
