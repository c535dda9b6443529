"""`python -m jobstream.server`: the HTTP API on JOBSTREAM_HOST:JOBSTREAM_PORT (and /metrics on
JOBSTREAM_METRICS_PORT, when it is set)."""

from __future__ import annotations

import sys

import structlog
import uvicorn

from jobstream import heap, logs, tracing
from jobstream.loading import AppNotFound, load_app
from jobstream.server import chat_request, connections, listeners
from jobstream.server.app import create_app
from jobstream.server.shutdown import DrainingServer
from jobstream.settings import Settings


def main() -> int:
    settings = Settings.for_process("server")
    if settings is None:
        return 2
    logs.configure(settings.log_level, json=settings.log_json)
    tracing.configure(settings)  # before create_app, which traces the creates only if on
    try:
        jobs = load_app(settings.app)
    except AppNotFound as exc:
        print(f"jobstream server: {exc}", file=sys.stderr)
        return 2
    chat_job = chat_request.chat_job_problem(settings.chat_job, jobs.jobs)
    if chat_job is not None:
        print(f"jobstream server: {chat_job}", file=sys.stderr)
        return 2
    open_files = connections.raise_open_file_limit()
    max_connections = connections.connection_limit(settings.max_connections, open_files)
    log = structlog.get_logger("server")
    log.info(
        "connection_limits",
        open_files=open_files,
        max_connections=max_connections,
        head_timeout_s=settings.head_timeout_s,
        keep_alive_s=settings.keep_alive_s,
    )
    if max_connections > open_files:
        log.warning(
            "max_connections_above_open_files",
            detail="JOBSTREAM_MAX_CONNECTIONS is more than the open-file limit can hold",
        )
    config = uvicorn.Config(
        create_app(settings, jobs=jobs),
        host=settings.host,
        port=settings.port,
        log_config=None,  # our structlog handlers format uvicorn's records too
        timeout_graceful_shutdown=5,
        lifespan="on",
        # uvicorn counts the connection asking among the open ones: one more lets exactly
        # max_connections be served, and a request on the next one is answered 503.
        limit_concurrency=max_connections + 1,
        timeout_keep_alive=settings.keep_alive_s,
        http=connections.http_protocol(settings.head_timeout_s),
        server_header=False,  # no `Server: uvicorn`: a version hunt starts from the name
    )
    heap.freeze_startup_objects()
    heap.defer_young_collections(heap.YOUNG_THRESHOLD)
    # With JOBSTREAM_METRICS_PORT, its listener too: one server, one lifespan, both sockets.
    # Idle keep-alive connections left to close from the proxy's side (its keep-alive is
    # shorter than ours), so that it never sends a request on one we are closing.
    server = DrainingServer(config, idle_drain_s=settings.keep_alive_s)
    server.run(sockets=listeners.sockets(config, settings))
    # A start-up that failed (the database never answered) is an exit a supervisor sees.
    return 0 if server.started else 1


if __name__ == "__main__":
    sys.exit(main())
