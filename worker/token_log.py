"""Writes an attempt's text to its job's log exactly once, even when a commit's reply is lost.

A flush whose connection dies may have committed or not: the client cannot tell. Sending the
chunk again could store it twice (the run_token fence admits both writes, the attempt still holds
the job), and a reader rebuilding the text from the log would see it twice. So after such a
failure the next write first asks the log how much of the attempt's text it holds, and sends only
the rest.
"""

from __future__ import annotations

import asyncpg

from jobstream import attempts, db
from jobstream.attempts import Claimed


class TokenLog:
    def __init__(self, pool: asyncpg.Pool, held: Claimed) -> None:
        self._pool = pool
        self._held = held
        self._durable = 0  # characters of this attempt's text known to be committed
        self._in_doubt = False  # the last write may or may not have committed

    @property
    def in_doubt(self) -> bool:
        """The last write may or may not have committed: the next one reconciles first."""
        return self._in_doubt

    async def write(self, chunk: str) -> None:
        """Append `chunk`, the text that follows everything written before.

        After a failed write, pass the failed text again (with anything since appended to it).
        Raises db.DISCONNECTS errors (then the write is in doubt) and Fenced.
        """
        if self._in_doubt:
            committed = await attempts.written_chars(self._pool, self._held)
            chunk = chunk[committed - self._durable :]
            self._durable = committed
            self._in_doubt = False
        if not chunk:
            return
        try:
            await attempts.append_tokens(self._pool, self._held, [chunk])
        except db.DISCONNECTS:
            self._in_doubt = True
            raise
        self._durable += len(chunk)
