"""The Server-Sent Events wire format: frames the server writes, and a parser for clients.

The parser follows the WHATWG event-stream algorithm (lines end in CRLF, LF or CR; `:` starts a
comment; a blank line dispatches) so the command-line client and the tests read a stream exactly
as a browser's EventSource would.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def frame(event: str, data: str, *, id: str | None = None) -> bytes:
    lines = [f"id: {id}"] if id is not None else []
    lines.append(f"event: {event}")
    # A newline inside data would end the field; the spec's answer is one data line per line.
    # Only CR, LF and CRLF end an SSE line: str.splitlines would also cut at U+2028 and friends,
    # which JSON leaves as they are and the client would read back as "\n".
    lines += [f"data: {line}" for line in _LINE_BREAK.split(data)]
    return ("\n".join(lines) + "\n\n").encode()


def comment(text: str) -> bytes:
    return f": {text}\n\n".encode()


def retry(ms: int) -> bytes:
    return f"retry: {ms}\n\n".encode()


@dataclass(frozen=True, slots=True)
class Message:
    event: str
    data: str
    id: str | None  # the last event id in force when this message was dispatched


@dataclass(frozen=True, slots=True)
class Comment:
    text: str


@dataclass(frozen=True, slots=True)
class Retry:
    ms: int


Item = Message | Comment | Retry


class Parser:
    """Incremental: feed text as it arrives, get back what it completed."""

    def __init__(self) -> None:
        self._pending = ""
        self._event = ""
        self._data: list[str] = []
        self._has_data = False
        self.last_id: str | None = None
        self._after_cr = False

    def feed(self, text: str) -> list[Item]:
        buffer = self._pending + text
        start = 0
        if self._after_cr and buffer.startswith("\n"):
            start = 1  # the LF of a CRLF whose CR ended the previous chunk
        if buffer:
            self._after_cr = False
        items: list[Item] = []
        while (cut := _line_end(buffer, start)) is not None:
            item = self._line(buffer[start : cut[0]])
            if item is not None:
                items.append(item)
            start = cut[1]
            self._after_cr = start == len(buffer) and buffer[-1] == "\r"
        self._pending = buffer[start:]
        return items

    def _line(self, line: str) -> Item | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return Comment(line[1:].removeprefix(" "))
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
            self._has_data = True
        elif name == "id" and "\0" not in value:
            self.last_id = value
        elif name == "retry" and value.isdigit():
            return Retry(int(value))
        return None

    def _dispatch(self) -> Message | None:
        event, data, had = self._event or "message", "\n".join(self._data), self._has_data
        self._event, self._data, self._has_data = "", [], False
        return Message(event, data, self.last_id) if had else None


def _line_end(buffer: str, start: int) -> tuple[int, int] | None:
    """(end of the first complete line from `start`, start of the next), or None if none is."""
    lf, cr = buffer.find("\n", start), buffer.find("\r", start)
    if cr == -1 or (lf != -1 and lf < cr):
        return None if lf == -1 else (lf, lf + 1)
    return cr, cr + 2 if buffer[cr + 1 : cr + 2] == "\n" else cr + 1


async def items(response: httpx.Response) -> AsyncIterator[Item]:
    """Everything an open streaming response sends, as it arrives."""
    parser = Parser()
    async for text in response.aiter_text():
        for item in parser.feed(text):
            yield item
