"""`python -m worker`: run one worker process until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import sys

import structlog

from jobstream import logs
from jobstream.errors import DatabaseUnavailable
from jobstream.settings import Settings, SettingsError
from worker.app import serve


def main() -> int:
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"jobstream worker: {exc}", file=sys.stderr)
        return 2
    if settings.database_url is None:
        print(
            "jobstream worker: DATABASE_URL is not set (use `make run` for a local database)",
            file=sys.stderr,
        )
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
