"""A lean HTTP/1.1 keep-alive client for load: what the server can take, not what httpx can send.

On this 2-core machine httpx spent more CPU per request than the server answering it (py-spy: the
load process at 94 % of a core, the server at 37 %), so the figure measured the client. This one
writes a prepared request and reads the answer's head and Content-Length body: a few
microseconds a request. Loopback only; it speaks just enough HTTP for our JSON answers.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import orjson


class Connection:
    """One keep-alive connection; one request at a time, like a browser tab or a worker."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def open(cls, base_url: str) -> Connection:
        parts = urlsplit(base_url)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        return cls(reader, writer)

    async def post_json(
        self, path: str, body: object, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        """POST `body` as JSON; returns (status, response body)."""
        payload = orjson.dumps(body)
        lines = [
            f"POST {path} HTTP/1.1",
            "Host: 127.0.0.1",
            "Content-Type: application/json",
            f"Content-Length: {len(payload)}",
            *(f"{name}: {value}" for name, value in (headers or {}).items()),
        ]
        self._writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
        head = await self._reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self._reader.readexactly(length)

    async def close(self) -> None:
        self._writer.close()
        await self._writer.wait_closed()
