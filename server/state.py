"""What the app's lifespan owns, reachable from every handler as `request.app.state.js`."""

from __future__ import annotations

from dataclasses import dataclass, field

import asyncpg
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from jobstream.app import JobDefinition
from jobstream.clock import Clock
from jobstream.server.create_rate import CreateRate
from jobstream.server.create_writer import CreateWriter
from jobstream.server.estimates import Estimates
from jobstream.server.event_stream import EventStream
from jobstream.server.hub import Hub
from jobstream.server.key_generations import KeyGenerations
from jobstream.server.runnable_notices import RunnableNotices
from jobstream.server.stream_slots import StreamSlots
from jobstream.server.stream_tokens import StreamTokens
from jobstream.settings import Settings
from jobstream.worker.providers.base import Provider


@dataclass
class AppState:
    settings: Settings
    clock: Clock
    pool: asyncpg.Pool
    hub: Hub
    tokens: StreamTokens
    # Providers price a job's reservation at create time; the server never calls them.
    providers: dict[str, Provider]
    notices: RunnableNotices  # wakes workers for new jobs, outside the creating transactions
    creates: CreateWriter  # single creates of concurrent requests, one statement together
    estimates: Estimates  # how long jobs will take, from inputs read once a second
    create_rate: CreateRate  # the default create rate, per tenant (JOBSTREAM_TENANT_CREATE_RATE)
    streams: StreamSlots  # each tenant's open streams, capped (JOBSTREAM_TENANT_MAX_STREAMS)
    # The deployment's own jobs by name (JOBSTREAM_APP), besides the built-in `llm`.
    jobs: dict[str, JobDefinition] = field(default_factory=dict)
    # The default tenant's key generation, for its answers' events tokens (read once a second).
    generations: KeyGenerations = field(default_factory=KeyGenerations)
    open_streams: int = 0  # SSE responses in progress in this process

    async def serve_stream(
        self, stream: EventStream, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Serve one SSE response, counted in `open_streams` while it is open."""
        self.open_streams += 1
        try:
            await stream(scope, receive, send)
        finally:
            self.open_streams -= 1


def state(request: Request) -> AppState:
    app_state: AppState = request.app.state.js
    return app_state
