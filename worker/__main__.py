"""`python -m worker`: run one worker process until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import sys

import structlog

from jobstream import logs
from jobstream.errors import DatabaseUnavailable
from jobstream.settings import Settings
from worker.app import serve


def main() -> int:
    settings = Settings.for_process("worker")
    if settings is None:
        return 2
    logs.configure(settings.log_level, json=settings.log_json)
    try:
        asyncio.run(serve(settings))
    except DatabaseUnavailable as exc:
        structlog.get_logger("worker").error("database_unavailable", error=str(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
