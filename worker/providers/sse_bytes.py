"""Server-sent events read from a body's bytes: the providers read their SDK's stream this way,
parsing each event's data with orjson, rather than as the SDK's typed models (at hundreds of
streams those cost several times the CPU a token: docs/architecture.md)."""

from __future__ import annotations


class SseDecoder:
    """The `data:` payloads of a server-sent event stream, one per event (lines joined), from
    the body's bytes as they arrive. A line ends with LF, CRLF or CR; a CRLF may be split
    between two reads."""

    def __init__(self) -> None:
        self._data: list[bytes] = []
        self._partial = b""  # the start of a line whose end has not arrived
        self._after_cr = False  # the last read ended with CR: a LF opening the next is its end

    def feed(self, piece: bytes) -> list[bytes]:
        if self._after_cr and piece.startswith(b"\n"):
            piece = piece[1:]
        if not piece:
            return []
        self._after_cr = piece.endswith(b"\r")
        text = self._partial + piece if self._partial else piece
        if b"\r" in text:
            text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = text.split(b"\n")
        self._partial = lines.pop()
        return [data for line in lines if (data := self._line(line)) is not None]

    def finish(self) -> list[bytes]:
        """What the body's end completes: its last line, even without an ending, and its event."""
        found = [] if not self._partial else [self._line(self._partial)]
        self._partial = b""
        found.append(self._flush())
        return [data for data in found if data is not None]

    def _line(self, line: bytes) -> bytes | None:
        if not line:
            return self._flush()
        if line.startswith(b":"):
            return None  # comment: a keep-alive
        field, _, value = line.partition(b":")
        if field == b"data":
            self._data.append(value.removeprefix(b" "))
        return None  # event:, id:, retry: mean nothing here: the data
        # names its own type

    def _flush(self) -> bytes | None:
        if not self._data:
            return None
        data = b"\n".join(self._data)
        self._data.clear()
        return data
