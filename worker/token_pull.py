"""An attempt's side of the writes its worker's token writer takes (worker/token_writes.py).

While the stream runs, the writer takes the attempt's due text as it puts each write together,
and its answer lands here, handed over as to a future: the runner is not woken for a flush that
went well.
What went otherwise reaches the runner: a fence through its inbox (LeaseLost), a write in
doubt or refused for its offset as TokenLog.in_doubt, a wake-up, and the text put back; the
runner then writes by itself (TokenLog.write reconciles the log first) until the log is sure
again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import structlog

from jobstream import db
from jobstream.event_loop import running_loop
from jobstream.token_appends import Appended, TokenAppend
from jobstream.worker.coalescer import Coalescer
from jobstream.worker.failure import Failure
from jobstream.worker.inbox import Inbox, LeaseLost, StreamFailed
from jobstream.worker.token_log import TokenLog
from jobstream.worker.token_writes import TokenWrites

log = structlog.get_logger(__name__)


class TokenPull:
    def __init__(
        self, coalescer: Coalescer, tokens: TokenLog, inbox: Inbox, writes: TokenWrites
    ) -> None:
        self._coalescer = coalescer
        self._tokens = tokens
        self._inbox = inbox
        self._writes = writes
        self._taken: TokenAppend | None = None  # in flight
        self._landed: asyncio.Future[None] | None = None  # awaited by `idle`
        # The runner writes by itself (its log was in doubt): the writer takes nothing, or two
        # writes would name one offset, and the reconcile would drop the wrong text.
        self._alone = False

    def attach(self) -> None:
        """The writer takes this attempt's due text from now on, until detach."""
        self._writes.attach(self)

    def detach(self) -> None:
        self._writes.detach(self)

    @contextlib.contextmanager
    def writing_alone(self) -> Iterator[None]:
        """While the runner writes this attempt's text by itself, the writer takes none."""
        self._alone = True
        try:
            yield
        finally:
            self._alone = False

    @property
    def in_flight(self) -> bool:
        """A write holds text of this attempt's: its answer is still to come."""
        return self._taken is not None

    @property
    def due_at(self) -> float | None:
        if self._taken is not None or self._alone or self._tokens.in_doubt:
            return None
        return self._coalescer.due_at

    def pending(self, now: float) -> None:
        """The pump's word: text is due at the coalescer's time, or now (a full chunk)."""
        if self._taken is not None or self._alone:
            return  # announced when the write out lands
        if self._tokens.in_doubt:
            self._inbox.wake()  # the runner writes by itself until the log is sure
        elif self._coalescer.flush_due(now):
            self._writes.due(now)
        elif self._coalescer.due_at is not None:
            self._writes.due(self._coalescer.due_at)

    def take(self, now: float) -> TokenAppend | None:
        if self.due_at is None or not self._coalescer.flush_due(now):
            return None
        append = self._tokens.append_of(self._coalescer.take())
        self._taken = append
        return append

    # --- the answer of the write that took this attempt's text ---
    # The writer gives it as it would to a future (group_write.Reply), and it is handled at
    # once: no future and no callback a write, a thousand of each a tick with 1,000 streams.

    def done(self) -> bool:
        """No write holds this attempt's text: nothing to answer."""
        return self._taken is None

    def set_result(self, result: Appended, /) -> None:
        self._answered(result, None)

    def set_exception(self, exception: BaseException, /) -> None:
        self._answered(None, exception)

    def cancel(self, msg: Any | None = None) -> bool:
        self._answered(None, None)  # the writer stopped: the worker is going
        return True

    def _answered(self, outcome: Appended | None, error: BaseException | None) -> None:
        append, self._taken = self._taken, None
        assert append is not None, "an answer comes only for a write that took text"
        try:
            self._settle(append, outcome, error)
        finally:
            if self._landed is not None and not self._landed.done():
                self._landed.set_result(None)

    async def idle(self) -> None:
        """Until no write of this attempt's text is in flight."""
        if self._taken is not None:
            self._landed = running_loop().create_future()
            await asyncio.shield(self._landed)

    def _settle(
        self, append: TokenAppend, outcome: Appended | None, error: BaseException | None
    ) -> None:
        if outcome is not None:
            if not outcome.held:
                self._inbox.put_nowait(LeaseLost("a token write was refused: the job moved on"))
            elif self._tokens.landed(append, outcome):
                # Text that came while this write was out waited for its answer.
                if self._coalescer.due_at is not None:
                    self._writes.due(self._coalescer.due_at)
                return
            else:
                self._put_back(append)  # refused for its offset: reconcile, then write again
            return
        if error is None:  # cancelled: the writer stopped, the worker is going
            self._put_back(append)
            return
        if isinstance(error, db.DISCONNECTS):
            log.warning("token_flush_failed", error=str(error) or type(error).__name__)
            self._tokens.lost()
            self._put_back(append)
            return
        log.error("token_write_crashed", exc_info=error)
        self._inbox.put_nowait(StreamFailed(Failure.internal(error)))

    def _put_back(self, append: TokenAppend) -> None:
        """The text waits again, first in line; the runner writes it (the log is in doubt)."""
        self._coalescer.put_back(list(append.chunks), running_loop().time())
        self._inbox.wake()
