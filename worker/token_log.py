"""Writes an attempt's text to its job's log exactly once, even when a commit's reply is lost.

A flush whose connection dies may have committed or not: the client cannot tell, and a
half-open connection may even deliver it later, after the writer has moved on. Sending the chunk
again could store it twice (the run_token fence admits both writes, the attempt still holds the
job), and a reader rebuilding the text from the log would see it twice. So every append names
the offset it expects (how many characters of the attempt's text the log holds) and lands only
there (queries.APPEND_TOKENS_MANY): of two writes meant for one offset, at most one lands.
After a failure, or a write refused for its offset, the next write asks the log for its offset
and sends only the rest.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import asyncpg

from jobstream import db, token_appends
from jobstream.claims import Claimed
from jobstream.errors import Fenced, JobstreamError
from jobstream.token_appends import Appended, TokenAppend

# Offset refusals in a row before giving up. Each one means another write of this attempt
# landed since the offset was read; only writes already sent can do that, so a second refusal
# in a row is already a surprise.
MAX_REFUSALS = 5

# Sends one append: the worker's group writer (worker/token_writes.py), or a statement alone.
AppendWriter = Callable[[TokenAppend], Awaitable[Appended]]


class OffsetRace(JobstreamError):
    """The log's offset kept moving under this attempt's writes: something else writes its text."""


class TokenLog:
    def __init__(
        self, pool: asyncpg.Pool, held: Claimed, *, writer: AppendWriter | None = None
    ) -> None:
        self._pool = pool
        self._held = held
        self._writer: AppendWriter = writer or (lambda append: _alone(pool, append))
        # Characters of this attempt's text known to be committed; the text of the next write
        # starts there.
        self._durable = 0
        self._in_doubt = False  # the last write may or may not have committed (or may later)

    @property
    def durable(self) -> int:
        """Characters of the attempt's text known to be in the log: where the next text goes."""
        return self._durable

    @property
    def in_doubt(self) -> bool:
        """The last write may or may not have committed: the next one reconciles first."""
        return self._in_doubt

    def append_of(self, chunks: Sequence[str]) -> TokenAppend:
        """`chunks` as an append after everything written before, for the worker's writer to
        take (worker/token_pull.py); its answer goes to landed, or its failure to lost. Only
        while the log is not in doubt: then write reconciles first."""
        assert not self._in_doubt, "a write in doubt is reconciled by write()"
        return TokenAppend(self._held, chunks, self._durable)

    def landed(self, append: TokenAppend, answer: Appended) -> bool:
        """The answer to an append_of (of a held attempt): True when it landed; False when the
        log was not at its offset, which makes the log in doubt."""
        if answer.last_seq is None:
            self._in_doubt = True
            return False
        self._durable = append.at + sum(len(chunk) for chunk in append.chunks)
        return True

    def lost(self) -> None:
        """An append_of's connection failed: it may or may not have landed."""
        self._in_doubt = True

    async def write(self, chunks: Sequence[str]) -> None:
        """Append `chunks`, the text that follows everything written before.

        After a failed write, pass the failed text again (with anything since appended to it):
        it still starts where the log's text was known to end. Raises db.DISCONNECTS errors
        (then the write is in doubt) and Fenced.
        """
        start = self._durable
        size = sum(len(chunk) for chunk in chunks)
        landed = 0  # characters of `chunks` the log already holds
        for _ in range(MAX_REFUSALS):
            if self._in_doubt:
                landed = await token_appends.written_chars(self._pool, self._held) - start
                self._in_doubt = False
            rest = _drop(chunks, landed)
            if not rest:
                self._durable = start + size
                return
            try:
                answer = await self._writer(TokenAppend(self._held, rest, start + landed))
            except db.DISCONNECTS:
                # Not even the reconciled part moves `_durable`: the caller passes this text
                # again from `start`, and the next write reconciles it with the log.
                self._in_doubt = True
                raise
            if not answer.held:
                raise Fenced(f"job {self._held.job_id}: not running under this attempt")
            if answer.last_seq is not None:
                self._durable = start + size
                return
            # Refused: the log is not where we left it, so an earlier write in doubt committed
            # after we read the offset. Read it again; the text it holds is not sent twice.
            self._in_doubt = True
        raise OffsetRace(f"job {self._held.job_id}: the text offset kept moving")


async def _alone(pool: asyncpg.Pool, append: TokenAppend) -> Appended:
    (answer,) = await token_appends.append_tokens_many(pool, [append])
    return answer


def _drop(chunks: Sequence[str], count: int) -> list[str]:
    """`chunks` without their first `count` characters."""
    rest = list(chunks)
    while count > 0 and rest:
        if len(rest[0]) <= count:
            count -= len(rest.pop(0))
        else:
            rest[0] = rest[0][count:]
            count = 0
    return rest
