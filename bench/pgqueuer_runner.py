"""PgQueuer consumers with a no-op entrypoint, for bench.queue_side_by_side.

    python -m bench.pgqueuer_runner URL --consumers 5 --batch-size 10

Shaped like PgQueuer's own tools/benchmark.py: `--consumers` PgQueuer instances in this process,
each on a connection of its own (its docs: a dedicated connection, not a pool, for a queue
manager), on uvloop as its `pgq run` command does. Prints `ready` once connected and registered,
starts consuming at the first line on stdin (so several processes start together), and stops
gracefully at SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import threading
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job

ENTRYPOINT = "bench"


async def noop(job: Job) -> None:
    """The job: nothing, so that what is measured is the queue."""


async def consume(args: argparse.Namespace) -> None:
    connections = [await asyncpg.connect(args.url) for _ in range(args.consumers)]
    try:
        queues = [PgQueuer(AsyncpgDriver(conn)) for conn in connections]
        for pgq in queues:
            pgq.entrypoint(ENTRYPOINT)(noop)

        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        go = asyncio.Event()
        # A daemon thread, not the default executor: a blocked readline must not hold up exit.
        threading.Thread(target=lambda: (sys.stdin.readline(), loop.call_soon_threadsafe(go.set)),
                         daemon=True).start()  # fmt: skip
        print("ready", flush=True)
        await _first(go.wait(), stopping.wait())
        if stopping.is_set():
            return
        runs = [
            asyncio.create_task(
                pgq.run(
                    batch_size=args.batch_size,
                    max_concurrent_tasks=args.max_concurrent or None,
                    dequeue_timeout=timedelta(seconds=args.dequeue_timeout),
                )
            )
            for pgq in queues
        ]
        await _first(stopping.wait(), *runs)
        for pgq in queues:
            pgq.shutdown.set()
        await asyncio.wait_for(asyncio.gather(*runs), 30)
    finally:
        for conn in connections:
            await conn.close()


async def _first(*waits: Coroutine[Any, Any, Any] | asyncio.Task[Any]) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        if task not in waits:  # a wait made here, not a consumer's run
            task.cancel()
    for task in done:
        task.result()  # a consumer that failed fails the runner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url")
    parser.add_argument("--consumers", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--max-concurrent", type=int, default=0, help="0: no limit")
    parser.add_argument("--dequeue-timeout", type=float, default=30.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    try:
        import uvloop
    except ImportError:
        asyncio.run(consume(args))
    else:
        uvloop.run(consume(args))


if __name__ == "__main__":
    main()
