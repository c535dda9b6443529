"""The composition root of the HTTP server: `create_app(settings)`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager

import asyncpg
import structlog
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from jobstream import db, migrations
from jobstream.app import App
from jobstream.clock import Clock, DatabaseClock
from jobstream.errors import DatabaseUnavailable
from jobstream.loading import load_app
from jobstream.server import (
    access_log,
    admin_api,
    batch_api,
    chat_api,
    chat_page,
    events_api,
    health,
    job_types,
    jobs_api,
    metrics,
    openapi,
    pages,
    problems,
    stream_slots,
)
from jobstream.server.browser_guard import BrowserGuard
from jobstream.server.create_rate import CreateRate
from jobstream.server.create_writer import CreateWriter
from jobstream.server.estimates import Estimates
from jobstream.server.hub import Hub
from jobstream.server.listeners import ListenerRoutes
from jobstream.server.runnable_notices import RunnableNotices
from jobstream.server.security_headers import SecuredStarlette
from jobstream.server.shutdown import Shutdown
from jobstream.server.state import AppState
from jobstream.server.stream_slots import StreamSlots
from jobstream.server.stream_tokens import StreamTokens
from jobstream.server.traced import traced
from jobstream.server.v1 import api as v1_api
from jobstream.server.v1 import errors as v1_errors
from jobstream.settings import Settings
from jobstream.worker.providers.registry import build_providers, close_providers

log = structlog.get_logger(__name__)

Handler = Callable[[Request], Awaitable[Response]]


def create_app(
    settings: Settings, *, clock: Clock | None = None, jobs: App | None = None
) -> Starlette:
    """The HTTP API. `jobs` holds the jobs it creates besides the built-in one (None: the app
    JOBSTREAM_APP names, if any), read at once so that a bad JOBSTREAM_APP stops the start."""
    if settings.database_url is None:
        raise ValueError("create_app needs settings.database_url")
    database_url = settings.database_url
    # LISTEN and schema changes need a session: JOBSTREAM_DIRECT_DATABASE_URL when DATABASE_URL
    # is a transaction pooler, else the one URL.
    session_url = settings.session_database_url or database_url
    definitions = dict((jobs if jobs is not None else load_app(settings.app)).jobs)
    access_log.install()
    # Made here, not in the lifespan: tokens signed with a per-process key must stay valid for
    # the app's whole life, and the server asks for shutdown before the lifespan ends.
    tokens = StreamTokens(settings.secret_key, settings.stream_token_ttl_s)
    shutdown = Shutdown()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Each part is released on every way out, start-up failures included, in reverse order:
        # streams are told to end, the hub's tasks stop, then providers and pool close.
        async with AsyncExitStack() as cleanup:

            async def open_pool() -> asyncpg.Pool:
                pool = await db.create_pool(
                    database_url, min_size=settings.db_pool_min, max_size=settings.db_pool_max,
                    pooler=settings.pooled,
                )  # fmt: skip
                try:
                    await migrations.apply_schema_on(pool, settings.direct_database_url)
                except BaseException:
                    pool.terminate()  # the step runs again from the start: leave nothing open
                    raise
                return pool

            # The database may restart between answering and the pool's connections.
            try:
                pool = await db.start_with_database(
                    database_url, settings.db_connect_timeout_s, open_pool
                )
            except DatabaseUnavailable as exc:
                # One line, as the worker says it: an operator's condition, not our bug, so no
                # traceback (jobstream/logs.py drops uvicorn's copy of it).
                log.error("database_unavailable", error=str(exc))
                raise
            cleanup.push_async_callback(pool.close)
            providers = build_providers(settings)
            cleanup.push_async_callback(close_providers, providers)
            hub = Hub(
                database_url=session_url,
                pool=pool,
                recheck_s=settings.hub_recheck_s,
                probe_s=settings.hub_probe_s,
                buffer=settings.subscriber_buffer,
            )
            cleanup.push_async_callback(hub.stop)
            cleanup.callback(shutdown.begin)
            await hub.start()
            shutdown.on_begin(hub.drain)
            notices = RunnableNotices(pool)
            notifier = asyncio.create_task(notices.run(), name="runnable-notices")
            notifier.add_done_callback(_on_notifier_done)
            cleanup.push_async_callback(_cancel, notifier)
            app_clock = clock or DatabaseClock()
            creates = CreateWriter(
                pool, app_clock, notices.announce,
                storage_bytes=settings.tenant_storage_bytes or None,
            )  # fmt: skip
            create_writer = asyncio.create_task(creates.run(), name="create-writer")
            create_writer.add_done_callback(_on_create_writer_done)
            cleanup.push_async_callback(_cancel, create_writer)
            app.state.js = AppState(
                settings=settings,
                clock=app_clock,
                pool=pool,
                hub=hub,
                tokens=tokens,
                providers=providers,
                notices=notices,
                creates=creates,
                estimates=Estimates(pool, app_clock),
                create_rate=CreateRate(settings.tenant_create_rate, settings.tenant_create_burst),
                streams=StreamSlots(stream_slots.process_limit(settings)),
                jobs=definitions,
            )
            # server_ready follows once uvicorn listens
            log.info("app_started", tenant_max_streams=app.state.js.streams.limit)
            yield

    routes = [
        Route("/healthz", health.healthz),
        Route("/readyz", health.readyz),
        Route("/metrics", metrics.metrics),
        Route("/openapi.json", openapi.document),
        _resource(
            "/api/jobs",
            {"POST": traced("POST /api/jobs", jobs_api.create_job), "GET": jobs_api.list_jobs},
        ),
        Route(
            "/api/jobs/batch",
            traced("POST /api/jobs/batch", batch_api.create_batch),
            methods=["POST"],
        ),
        Route("/api/job-types", job_types.list_job_types, methods=["GET"]),
        Route("/api/jobs/{job_id}", jobs_api.get_job, methods=["GET"]),
        Route("/api/jobs/{job_id}/cancel", jobs_api.cancel_job, methods=["POST"]),
        Route("/api/jobs/{job_id}/events", events_api.follow_events_app, methods=["GET"]),
        Route("/api/jobs/{job_id}/retry", jobs_api.retry_job, methods=["POST"]),
        # The OpenAI Responses API subset of background mode, for the official SDKs.
        Route("/v1/responses", v1_api.create_response, methods=["POST"]),
        _resource(
            "/v1/responses/{response_id}",
            {"GET": v1_api.retrieve_response, "DELETE": v1_api.delete_response},
        ),
        Route("/v1/responses/{response_id}/cancel", v1_api.cancel_response, methods=["POST"]),
        # The Vercel AI SDK's chat protocol (useChat), over jobs; `:path`: a chat id is the
        # client's, and may hold a slash.
        Route("/api/chat", chat_api.create_chat, methods=["POST"]),
        Route("/api/chat/{chat_id:path}/stream", chat_api.resume_chat, methods=["GET"]),
        Route("/api/chat/{chat_id:path}/stop", chat_api.stop_chat, methods=["POST"]),
        # The operator's dashboard's data and actions (server/admin_auth.py says who).
        *admin_api.routes(),
        Route("/", pages.index),
        Route("/jobs/{job_id}", pages.index),
        Route("/admin/", pages.admin),
        Route("/chat/", chat_page.chat_page),
        Route("/chat/{name}", chat_page.chat_asset),
        Mount("/static", StaticFiles(directory=pages.STATIC_DIR), name="static"),
    ]
    app = SecuredStarlette(
        routes=routes,
        lifespan=lifespan,
        # Outside the routes and their error handlers: a refused request reaches no route.
        middleware=[
            Middleware(BrowserGuard, settings=settings),
            Middleware(ListenerRoutes, settings=settings),
        ],
        # Under /v1 the same answers take OpenAI's error shape.
        exception_handlers=v1_errors.shaped(
            {
                problems.Problem: problems.handle_problem,
                HTTPException: problems.handle_http_exception,
                ClientDisconnect: problems.handle_client_gone,
                **{kind: problems.handle_database_lost for kind in problems.DATABASE_LOST},
                Exception: problems.handle_unexpected,
            }
        ),
    )
    app.state.shutdown = shutdown  # found by server.shutdown.DrainingServer
    app.state.openapi = openapi.build(definitions)
    return app


def _resource(path: str, handlers: dict[str, Handler]) -> Route:
    """One Route for a path with a handler per method. Two Routes for one path answered a method
    neither takes with the first one's Allow header alone (`405`, `Allow: POST` on /api/jobs,
    where GET is allowed too; RFC 9110 §15.5.6 wants every method named)."""

    async def endpoint(request: Request) -> Response:
        # Starlette answers HEAD wherever GET is allowed.
        return await handlers["GET" if request.method == "HEAD" else request.method](request)

    return Route(path, endpoint, methods=list(handlers))


def _on_notifier_done(task: asyncio.Task[None]) -> None:
    if task.cancelled():
        return
    # It survives every failed NOTIFY; ending on its own is a bug. Workers still find new jobs
    # by polling, so the server keeps serving.
    log.error("runnable_notices_died", exc_info=task.exception())


def _on_create_writer_done(task: asyncio.Task[None]) -> None:
    if task.cancelled():
        return
    # It survives every failed write; ending on its own is a bug. Creates then write alone
    # (CreateWriter.create), so the server keeps serving.
    log.error("create_writer_died", exc_info=task.exception())


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
