"""The composition root of the HTTP server: `create_app(settings)`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import structlog
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from jobstream import db
from jobstream.clock import Clock, DatabaseClock
from jobstream.settings import Settings
from server import health, jobs_api, pages, problems
from server.state import AppState

log = structlog.get_logger(__name__)


def create_app(settings: Settings, *, clock: Clock | None = None) -> Starlette:
    if settings.database_url is None:
        raise ValueError("create_app needs settings.database_url")
    database_url = settings.database_url

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await db.wait_for_database(database_url, settings.db_connect_timeout_s)
        pool = await db.create_pool(
            database_url, min_size=settings.db_pool_min, max_size=settings.db_pool_max
        )
        try:
            async with pool.acquire() as conn:
                await db.apply_schema(conn)
            app.state.js = AppState(settings=settings, clock=clock or DatabaseClock(), pool=pool)
            log.info("server_ready")
            yield
        finally:
            await pool.close()

    routes = [
        Route("/healthz", health.healthz),
        Route("/readyz", health.readyz),
        Route("/api/jobs", jobs_api.create_job, methods=["POST"]),
        Route("/api/jobs", jobs_api.list_jobs, methods=["GET"]),
        Route("/api/jobs/{job_id}", jobs_api.get_job, methods=["GET"]),
        Route("/api/jobs/{job_id}/cancel", jobs_api.cancel_job, methods=["POST"]),
        Route("/api/jobs/{job_id}/retry", jobs_api.retry_job, methods=["POST"]),
        Route("/", pages.index),
        Route("/jobs/{job_id}", pages.index),
        Mount("/static", StaticFiles(directory=pages.STATIC_DIR), name="static"),
    ]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            problems.Problem: problems.handle_problem,
            HTTPException: problems.handle_http_exception,
        },
    )
