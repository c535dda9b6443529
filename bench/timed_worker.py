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
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import uvloop

from jobstream import logs
from jobstream.settings import Settings
from worker.providers.base import Prompt, Provider, ProviderRequest, StreamItem, TextDelta
from worker.providers.simulated import SimulatedProvider
from worker.worker import Worker


class TimedProvider:
    name = "simulated"

    def __init__(self, sent: list[tuple[str, str, float]]) -> None:
        self._inner = SimulatedProvider()
        self._sent = sent

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamItem]:
        async for item in self._inner.stream(request):
            if isinstance(item, TextDelta):
                self._sent.append((request.prompt, item.text, time.monotonic()))
            yield item

    def estimate_cost(self, request: Prompt, output_tokens: int) -> Decimal:
        return self._inner.estimate_cost(request, output_tokens)


async def _run(settings: Settings, sent: list[tuple[str, str, float]]) -> None:
    providers: dict[str, Provider] = {"simulated": TimedProvider(sent)}
    worker = Worker(settings, providers=providers)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
    await worker.run()


def main() -> None:
    settings = Settings.from_env()
    logs.configure(settings.log_level, json=settings.log_json)
    sent: list[tuple[str, str, float]] = []
    # uvloop, as `python -m worker` runs: the figures are the shipped worker's.
    uvloop.run(_run(settings, sent))
    lines = (f"{prompt}\t{text}\t{at}\n" for prompt, text, at in sent)
    Path(os.environ["BENCH_SENT_PATH"]).write_text("".join(lines))


if __name__ == "__main__":
    main()
