"""A real webhook receiver on loopback: records every request, and can fail the first N."""

from __future__ import annotations

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
    requests: list[Received] = field(default_factory=list)

    async def _hook(self, request: Request) -> Response:
        self.requests.append(Received(dict(request.headers), await request.body()))
        if len(self.requests) <= self.fail_first:
            return Response("receiver down", status_code=500)
        return Response(status_code=204)


@asynccontextmanager
async def webhook_receiver(*, fail_first: int = 0) -> AsyncIterator[Receiver]:
    receiver = Receiver(fail_first=fail_first)
    app = Starlette(routes=[Route("/hook", receiver._hook, methods=["POST"])])
    async with serve(app) as base_url:
        receiver.url = f"{base_url}/hook"
        yield receiver
