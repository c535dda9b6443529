"""`python -m jobstream.worker`: run one worker process until SIGTERM or SIGINT."""

from __future__ import annotations

import sys

import structlog
import uvloop

from jobstream import heap, logs, tracing
from jobstream.errors import DatabaseUnavailable
from jobstream.loading import AppNotFound, load_app
from jobstream.settings import Settings
from jobstream.worker.app import serve


def main() -> int:
    settings = Settings.for_process("worker")
    if settings is None:
        return 2
    logs.configure(settings.log_level, json=settings.log_json)
    tracing.configure(settings)
    try:
        app = load_app(settings.app)
    except AppNotFound as exc:
        print(f"jobstream worker: {exc}", file=sys.stderr)
        return 2
    heap.freeze_startup_objects()
    heap.defer_young_collections(heap.YOUNG_THRESHOLD)
    try:
        # uvloop, as the server's uvicorn picks: a busy worker spends most of its time in the
        # event loop's own machinery (tasks, timers, sockets).
        uvloop.run(serve(settings, app))
    except DatabaseUnavailable as exc:
        structlog.get_logger("worker").error("database_unavailable", error=str(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
