"""Writes an attempt's text to its job's log exactly once, even when a commit's reply is lost.

A flush whose connection dies may have committed or not: the client cannot tell, and a
half-open connection may even deliver it later, after the writer has moved on. Sending the chunk
again could store it twice (the run_token fence admits both writes, the attempt still holds the
job), and a reader rebuilding the text from the log would see it twice. So every append names
the offset it expects (how many characters of the attempt's text the log holds) and lands only
there (queries.APPEND_TOKENS): of two writes meant for one offset, at most one lands. After a
failure, or a write refused for its offset, the next write asks the log for its offset and sends
only the rest.
"""

from __future__ import annotations

import asyncpg

from jobstream import attempts, db
from jobstream.attempts import Claimed
from jobstream.errors import JobstreamError

# Offset refusals in a row before giving up. Each one means another write of this attempt
# landed since the offset was read; only writes already sent can do that, so a second refusal
# in a row is already a surprise.
MAX_REFUSALS = 5


class OffsetRace(JobstreamError):
    """The log's offset kept moving under this attempt's writes: something else writes its text."""


class TokenLog:
    def __init__(self, pool: asyncpg.Pool, held: Claimed) -> None:
        self._pool = pool
        self._held = held
        self._durable = 0  # characters of this attempt's text known to be committed
        self._in_doubt = False  # the last write may or may not have committed (or may later)

    @property
    def in_doubt(self) -> bool:
        """The last write may or may not have committed: the next one reconciles first."""
        return self._in_doubt

    async def write(self, chunk: str) -> None:
        """Append `chunk`, the text that follows everything written before.

        After a failed write, pass the failed text again (with anything since appended to it).
        Raises db.DISCONNECTS errors (then the write is in doubt) and Fenced.
        """
        for _ in range(MAX_REFUSALS):
            if self._in_doubt:
                committed = await attempts.written_chars(self._pool, self._held)
                chunk = chunk[committed - self._durable :]
                self._durable = committed
                self._in_doubt = False
            if not chunk:
                return
            try:
                landed = await attempts.append_tokens(
                    self._pool, self._held, [chunk], at=self._durable
                )
            except db.DISCONNECTS:
                self._in_doubt = True
                raise
            if landed is not None:
                self._durable += len(chunk)
                return
            # Refused: the log is not where we left it, so an earlier write in doubt committed
            # after we read the offset. Read it again; the text it holds is not sent twice.
            self._in_doubt = True
        raise OffsetRace(f"job {self._held.job_id}: the text offset kept moving")
