"""Coalescing of token deltas into flushes: every `interval_s` or `max_bytes`, whichever first.

A provider emits a delta per token; writing each one would be a transaction and a NOTIFY per
token (docs/design.md, "Token writes"). The coalescer only decides *when* to flush and *what*;
the attempt runner does the writing. Time is passed in, so the policy is tested without a clock.
"""

from __future__ import annotations


class Coalescer:
    def __init__(self, *, interval_s: float, max_bytes: int) -> None:
        self._interval_s = interval_s
        self._max_bytes = max_bytes
        # Pending text as chunks of at most max_bytes each (a single larger delta stays whole):
        # each becomes one `token` event, so an event and an SSE frame stay bounded however
        # many deltas wait for one write.
        self._chunks: list[list[str]] = []
        self._last_bytes = 0  # bytes in the last chunk
        self._due_at: float | None = None
        self._output: list[str] = []
        self.deltas = 0  # deltas received: our count of output tokens

    def add(self, text: str, now: float) -> bool:
        """Take a delta; True when a flush is due now (a full chunk, or waited long enough).

        The time check matters when deltas arrive back to back: the runner's flush timer only
        fires while it waits, and a busy stream never makes it wait.
        """
        self.deltas += 1
        self._output.append(text)
        if text:
            size = len(text.encode())
            if not self._chunks or self._last_bytes >= self._max_bytes:
                self._chunks.append([text])
                self._last_bytes = size
            else:
                self._chunks[-1].append(text)
                self._last_bytes += size
            if self._due_at is None:
                self._due_at = now + self._interval_s
        return self.flush_due(now)

    def flush_due(self, now: float) -> bool:
        """A full chunk waits, or the oldest pending delta has waited long enough."""
        return self._last_bytes >= self._max_bytes or (
            self._due_at is not None and now >= self._due_at
        )

    @property
    def due_at(self) -> float | None:
        """When the oldest pending delta has waited long enough; None when nothing is pending."""
        return self._due_at

    def take(self) -> list[str]:
        """The pending text as chunks (one `token` event each), now counted as flushed."""
        chunks = ["".join(parts) for parts in self._chunks]
        self._chunks.clear()
        self._last_bytes = 0
        self._due_at = None
        return chunks

    def put_back(self, chunks: list[str], now: float) -> None:
        """A flush failed (the database is away): keep its text first in line, retry later."""
        if chunks:
            self._chunks[:0] = [[chunk] for chunk in chunks]
            if len(self._chunks) == len(chunks):
                self._last_bytes = len(chunks[-1].encode())
            self._due_at = now + self._interval_s

    @property
    def output(self) -> str:
        """Everything this attempt produced so far, flushed or not."""
        return "".join(self._output)
