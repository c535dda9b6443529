"""`python -m worker`: run one worker process until SIGTERM or SIGINT."""

from __future__ import annotations

import sys

import structlog
import uvloop

from jobstream import heap, logs
from jobstream.errors import DatabaseUnavailable
from jobstream.settings import Settings
from worker.app import serve


def main() -> int:
    settings = Settings.for_process("worker")
    if settings is None:
        return 2
    logs.configure(settings.log_level, json=settings.log_json)
    heap.freeze_startup_objects()
    heap.defer_young_collections(heap.YOUNG_THRESHOLD)
    try:
        # uvloop, as the server's uvicorn picks: a busy worker spends most of its time in the
        # event loop's own machinery (tasks, timers, sockets).
        uvloop.run(serve(settings))
    except DatabaseUnavailable as exc:
        structlog.get_logger("worker").error("database_unavailable", error=str(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
