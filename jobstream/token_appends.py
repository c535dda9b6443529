"""Token appends: attempts' text chunks added to their job's log, fenced and compare-and-set.

The offset an append names (`at`) makes a write in doubt safe to resend: if it landed after all,
the log holds more text than the offset says, and the resend writes nothing (worker/token_log.py
reconciles).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from jobstream.claims import Claimed
from jobstream.errors import Fenced
from jobstream.sql import queries


@dataclass(frozen=True)
class TokenAppend:
    """Chunks of one attempt's text to append, as the text after offset `at`: how many
    characters of its text the writer knows are in the log."""

    held: Claimed
    chunks: Sequence[str]
    at: int


@dataclass(frozen=True)
class Appended:
    """What became of one TokenAppend: `last_seq` once it landed; None, having written nothing,
    when the log held another amount of the text (a write in doubt landed after all) or when
    the attempt no longer holds its job (`held` false: fenced)."""

    last_seq: int | None
    held: bool


async def append_tokens_many(pool: asyncpg.Pool, appends: Sequence[TokenAppend]) -> list[Appended]:
    """Append every attempt's chunks in one statement and one commit (APPEND_TOKENS_MANY),
    fenced and compare-and-set per attempt; the answers are in the order of `appends`."""
    if any(not a.chunks for a in appends):
        raise ValueError("an append needs at least one chunk")
    texts = [chunk for a in appends for chunk in a.chunks]
    owners = [n for n, a in enumerate(appends, start=1) for _ in a.chunks]
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            queries.APPEND_TOKENS_MANY,
            [a.held.job_id for a in appends],
            [a.held.run_token for a in appends],
            [a.held.attempt for a in appends],
            [a.at for a in appends],
            [a.at + sum(len(chunk) for chunk in a.chunks) for a in appends],
            [len(a.chunks) for a in appends],
            texts,
            owners,
        )
    return [Appended(row["last_seq"], row["held"]) for row in rows]


async def append_tokens(
    pool: asyncpg.Pool, held: Claimed, texts: Sequence[str], *, at: int
) -> int | None:
    """One attempt's flush alone: its chunks as the text after offset `at`.

    Returns the new last_seq; or None, having written nothing, when the log holds another
    amount (a write in doubt landed after all): read written_chars and write what is missing.
    Raises Fenced when the attempt no longer holds the job.
    """
    (answer,) = await append_tokens_many(pool, [TokenAppend(held, texts, at)])
    if not answer.held:
        raise Fenced(f"job {held.job_id}: run_token {held.run_token} no longer holds the job")
    return answer.last_seq


async def written_chars(pool: asyncpg.Pool, held: Claimed) -> int:
    """Characters of this attempt's text committed to the log: the offset its next append names.

    Raises Fenced when the attempt no longer holds the job.
    """
    row = await pool.fetchrow(
        queries.ATTEMPT_TEXT_WRITTEN, held.job_id, held.attempt, held.run_token
    )
    if row is None or not row["held"]:
        raise Fenced(f"job {held.job_id}: run_token {held.run_token} no longer holds the job")
    return int(row["chars"])
