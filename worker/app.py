"""The worker process: start-up (database, schema), signals, and the run until SIGTERM."""

from __future__ import annotations

import asyncio
import signal

import structlog

from jobstream import db, migrations
from jobstream.app import App
from jobstream.settings import Settings
from jobstream.worker.worker import Worker

log = structlog.get_logger(__name__)


def create_worker(settings: Settings, app: App | None = None) -> Worker:
    """The production worker: database clock, system randomness, providers from settings,
    and the jobs of `app` (None: JOBSTREAM_APP's)."""
    return Worker(settings, app=app)


async def prepare_database(url: str, timeout_s: float) -> None:
    """Wait for PostgreSQL (one log line per try) and apply the schema (idempotent)."""

    async def migrate() -> None:
        conn = await db.connect(url)
        try:
            await migrations.apply_schema(conn)
        finally:
            await conn.close()

    await db.start_with_database(url, timeout_s, migrate)


async def serve(settings: Settings, app: App | None = None) -> None:
    """Run a worker until SIGTERM or SIGINT, then shut it down gracefully.

    Raises DatabaseUnavailable when PostgreSQL never answered within db_connect_timeout_s.
    """
    assert settings.database_url is not None  # checked by the caller, with a clear message
    # The schema change runs on a session of its own: the direct URL beside a pooler.
    session_url = settings.session_database_url or settings.database_url
    worker = create_worker(settings, app)
    # Every line of this process names its worker, signal handling included (the handlers below
    # run in a copy of this context).
    structlog.contextvars.bind_contextvars(worker_id=worker.worker_id)
    stop_requested = asyncio.Event()

    def on_signal(signum: signal.Signals) -> None:
        if stop_requested.is_set():
            # A second signal (a second Ctrl-C): no more grace, hand running jobs back now.
            log.info("signal_received_again", signal=signum.name, detail="handing jobs back now")
            worker.stop_now()
            return
        log.info("signal_received", signal=signum.name)
        stop_requested.set()
        worker.stop()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)

    # A signal while the database is still being waited for ends the process at once: there is
    # nothing to hand back yet.
    starting = asyncio.create_task(
        prepare_database(session_url, settings.db_connect_timeout_s),
        name="prepare-database",
    )
    stopping = asyncio.create_task(stop_requested.wait(), name="stop-requested")
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    await asyncio.gather(stopping, return_exceptions=True)
    if not starting.done():
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        log.info("stopped_before_start")
        return
    starting.result()  # DatabaseUnavailable, if it came to that
    await worker.run()
