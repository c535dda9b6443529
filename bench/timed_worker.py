"""A worker process whose simulated provider notes when each delta leaves it, for bench_stream.

`python -m bench.timed_worker`: runs like `python -m worker` until SIGTERM, then writes
`prompt<TAB>text<TAB>time.monotonic()` lines to $BENCH_SENT_PATH. CLOCK_MONOTONIC is one clock
for every process on a Linux host, so the client's arrival times compare with these directly.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import uvloop

from jobstream import heap, logs
from jobstream.settings import Settings
from jobstream.worker.providers.base import Provider, ProviderRequest, TextDelta
from jobstream.worker.providers.simulated import Pattern, SimulatedProvider
from jobstream.worker.worker import Worker


class TimedProvider(SimulatedProvider):
    """The simulated provider, noting the time each delta leaves it: in the one call it makes
    per token, not as an async generator around its stream (a generator's resume per token is
    CPU of the benchmark's, not of the worker it measures)."""

    def __init__(self, sent: list[tuple[str, str, float]]) -> None:
        super().__init__()
        self._sent = sent

    def _delta(self, request: ProviderRequest, pattern: Pattern, index: int) -> TextDelta:
        delta = super()._delta(request, pattern, index)
        self._sent.append((request.prompt, delta.text, time.monotonic()))
        return delta


async def _run(settings: Settings, sent: list[tuple[str, str, float]]) -> None:
    providers: dict[str, Provider] = {"simulated": TimedProvider(sent)}
    worker = Worker(settings, providers=providers)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
    await worker.run()


def main() -> None:
    settings = Settings.from_env()
    logs.configure(settings.log_level, json=settings.log_json)
    sent: list[tuple[str, str, float]] = []
    # The heap as `python -m worker` sets it (jobstream/heap.py): without it, the collector
    # took 0.7 s of a 1,000-stream run, full collections up to 57 ms at a time.
    heap.freeze_startup_objects()
    heap.defer_young_collections(heap.YOUNG_THRESHOLD)
    # uvloop, as `python -m worker` runs: the figures are the shipped worker's.
    uvloop.run(_run(settings, sent))
    lines = (f"{prompt}\t{text}\t{at}\n" for prompt, text, at in sent)
    Path(os.environ["BENCH_SENT_PATH"]).write_text("".join(lines))


if __name__ == "__main__":
    main()
