"""The worker's drain at shutdown: running attempts get a grace period, then hand their jobs back.

A stopping worker claims nothing more. Its running attempts may finish within
`shutdown_grace_s` (a second stop ends the wait); those still running are interrupted and hand
their job straight back to the queue rather than leave it to lease expiry (docs/design.md,
"Shutdown").
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import structlog

from jobstream.worker.attempt import AttemptRunner

# The worker's logger: the drain's lines belong with its `worker_stopping` and `worker_stopped`.
log = structlog.get_logger("worker.worker")

# After the grace period, interrupted attempts get this long to hand their job back before
# they are cancelled outright (their hand-back still runs, shielded).
HAND_BACK_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Running:
    """An attempt under way: its runner, and the worker's task that runs it."""

    runner: AttemptRunner
    task: asyncio.Task[None]


async def drain(
    running: list[Running], grace_s: float, stop_now: asyncio.Event, *, name: str
) -> None:
    """Wait out the grace period (cut short by `stop_now`), then hand back what still runs.

    `name` names the worker, for the task that watches `stop_now`.
    """
    if not running:
        return
    log.info("worker_draining", running=len(running), grace_s=grace_s)
    if grace_s > 0:
        await _grace([r.task for r in running], grace_s, stop_now, name=name)
    left = [r for r in running if not r.task.done()]
    if not left:
        return
    for r in left:
        r.runner.interrupt()
    _, stuck = await asyncio.wait([r.task for r in left], timeout=HAND_BACK_TIMEOUT_S)
    if not stuck:
        return
    log.warning("attempts_cancelled", count=len(stuck))
    for task in stuck:
        task.cancel()
    await asyncio.wait(stuck)
    settling = [r.runner.settling for r in left if r.runner.settling is not None]
    if settling:
        await asyncio.wait(settling, timeout=HAND_BACK_TIMEOUT_S)


async def _grace(
    tasks: list[asyncio.Task[None]], grace_s: float, stop_now: asyncio.Event, *, name: str
) -> None:
    """Wait until the tasks end, the grace period passes or `stop_now` is set."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    now = asyncio.create_task(stop_now.wait(), name=f"stop-now:{name}")
    pending: set[asyncio.Future[Any]] = set(tasks)
    try:
        while pending and not now.done() and loop.time() < deadline:
            _, pending = await asyncio.wait(
                pending | {now}, timeout=deadline - loop.time(), return_when="FIRST_COMPLETED"
            )
            pending.discard(now)
    finally:
        now.cancel()
