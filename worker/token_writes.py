"""Token chunks of all of a worker's streams, written together (jobstream/group_write.py): one
statement and one commit a tick.

Each stream coalesces its deltas into chunks (worker/coalescer.py); alone, every chunk of every
stream would be a transaction with its own NOTIFY, and NOTIFY takes a cluster-wide lock at
commit: 200 streams at 50 ms were 4,000 notifying commits a second, what this PostgreSQL does
at all. Here one statement (queries.APPEND_TOKENS_MANY) writes every chunk that arrived
meanwhile, at most one write at a time and at most one every `min_interval_s`, so the commits a
second depend on the number of worker processes, not on the number of streams.

The statement is fenced and compare-and-set per attempt: a fenced-out attempt, or one whose
offset moved, learns it from its own answer and does not fail the others' writes.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from jobstream import token_appends
from jobstream.group_write import GroupWriter
from jobstream.token_appends import Appended, TokenAppend

# The most chunks one statement writes; more wait for the next. Above the streams a worker runs:
# at 500, 1,000 streams took two writes a tick, so each stream waited for the other half's.
MAX_BATCH = 2000


class TokenWrites:
    def __init__(self, pool: asyncpg.Pool, *, min_interval_s: float) -> None:
        async def append_many(appends: Sequence[TokenAppend]) -> list[Appended]:
            return await token_appends.append_tokens_many(pool, appends)

        self._writer = GroupWriter(
            "token-writes", append_many, max_batch=MAX_BATCH, min_interval_s=min_interval_s
        )

    async def append(self, append: TokenAppend) -> Appended:
        """Write this chunk with the others of its tick. Raises the database's error when the
        whole write failed (a lost connection: the write is in doubt)."""
        return await self._writer.submit(append)

    async def run(self) -> None:
        """The writer, until cancelled."""
        await self._writer.run()
