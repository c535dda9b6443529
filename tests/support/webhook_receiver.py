"""A real webhook receiver on loopback: records every request, can fail the first N, and can
hold the first one until the test lets it answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.http_server import serve


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str = ""
    fail_first: int = 0  # answer 500 to this many requests before answering 204
    hold_first: asyncio.Event | None = None  # the first request answers once this is set
    requests: list[Received] = field(default_factory=list)

    async def _hook(self, request: Request) -> Response:
        self.requests.append(Received(dict(request.headers), await request.body()))
        seen = len(self.requests)
        if seen == 1 and self.hold_first is not None:
            await self.hold_first.wait()
        if seen <= self.fail_first:
            return Response("receiver down", status_code=500)
        return Response(status_code=204)


@asynccontextmanager
async def webhook_receiver(
    *, fail_first: int = 0, hold_first: asyncio.Event | None = None
) -> AsyncIterator[Receiver]:
    receiver = Receiver(fail_first=fail_first, hold_first=hold_first)
    app = Starlette(routes=[Route("/hook", receiver._hook, methods=["POST"])])
    async with serve(app) as base_url:
        receiver.url = f"{base_url}/hook"
        try:
            yield receiver
        finally:
            if hold_first is not None:
                hold_first.set()  # a held request must not keep the server from stopping
