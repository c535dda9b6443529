"""`python -m server`: the HTTP API on JOBSTREAM_HOST:JOBSTREAM_PORT."""

from __future__ import annotations

import sys

import uvicorn

from jobstream import logs
from jobstream.settings import Settings
from server.app import create_app
from server.shutdown import DrainingServer


def main() -> int:
    settings = Settings.for_process("server")
    if settings is None:
        return 2
    logs.configure(settings.log_level, json=settings.log_json)
    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,  # our structlog handlers format uvicorn's records too
        timeout_graceful_shutdown=5,
        lifespan="on",
    )
    DrainingServer(config).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
