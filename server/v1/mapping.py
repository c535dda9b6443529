"""A job's event log, told as the Responses API's event stream.

`ResponseEvents` folds the log from its first event, so the stream is a function of the log
alone: every reader, live or replaying, from any cursor, gets the same events with the same
`sequence_number`. The jobstream event with seq S becomes the events numbered S * STRIDE + i
(i < STRIDE), so numbers rise strictly, and a reader resuming after N reads the log again and
is told only what is numbered above N.

Retention compacts a finished job's log (jobstream/retention.py): a run of token events becomes
one event with the run's text at the run's last seq, naming its first as `from_seq`. A reader
from before the run reads the same text; one whose cursor is inside it has seen part of that text
and cannot be told the rest exactly, so it gets an `error` event, as for a pruned log.

The attempts are the output items: attempt a is the message item at output_index a - 1, opened
when the attempt starts running and closed when it ends, `incomplete` if it failed (an error, a
hand-back to the queue, a worker lost: the next attempt's reset is then its only end) and
`completed` if its result was accepted. `response.completed` carries the accepted item only, so
`output_text` is the job's result. docs/openai.md has the whole table.
"""

from __future__ import annotations

from typing import Any

from jobstream.events import Event
from jobstream.server.v1 import ids, objects
from jobstream.server.v1.objects import Head, ItemStatus

STRIDE = 10  # more than the most events one log event becomes (4: a done that closes an item)

ResponseEvent = dict[str, Any]


class _Item:
    """The message item of one attempt, as far as the log has told it."""

    def __init__(self, head: Head, attempt: int) -> None:
        self.attempt = attempt
        self.index = attempt - 1
        self.id = ids.item_id(head.job_id, attempt)
        self.text = ""


class ResponseEvents:
    """The events after `starting_after` (-1: all) that a job's log, fed from its start, becomes."""

    def __init__(self, head: Head, *, starting_after: int = -1) -> None:
        self._head = head
        self._after = starting_after
        self._open: _Item | None = None
        self._last: tuple[_Item, ItemStatus] | None = None  # the latest item closed
        self._started = False
        self.ended = False  # a terminal event was told: nothing follows

    def feed(self, event: Event) -> list[ResponseEvent]:
        """The Responses events that the log event `event` becomes, numbered, after the cursor."""
        if self.ended:
            return []  # a log may hold events after its end (an old log's operator retry)
        base = event.seq * STRIDE
        if _splits(event, self._after):
            self.ended = True
            return [{**_expired(), "sequence_number": base}]
        out: list[ResponseEvent] = []
        if not self._started:
            self._started = True
            out.append(self._lifecycle("response.created", "queued"))
        match event.type:
            case "status":
                self._status(event, out)
            case "reset":
                # A worker that died left its attempt open: the new attempt ends it.
                self._close("incomplete", out)
            case "token":
                item = self._opened(event.attempt, out)
                item.text += event.data["text"]
                out.append(
                    self._part_event(
                        "response.output_text.delta", item, delta=event.data["text"], logprobs=[]
                    )
                )
            case "attempt_error":
                self._close("incomplete", out)
            case "done":
                self._done(event, out)
            case "resync":
                # The log before the cursor was pruned: this stream cannot be told again.
                self.ended = True
                out.append(_expired())
            case _:
                pass  # `usage`: a response's usage is its result's, in response.completed
        numbered = [{**e, "sequence_number": base + i} for i, e in enumerate(out)]
        return [e for e in numbered if e["sequence_number"] > self._after]

    def _status(self, event: Event, out: list[ResponseEvent]) -> None:
        match event.data["status"]:
            case "queued":
                # Back in the queue after an attempt (a retry, or a worker's hand-back at
                # shutdown): that attempt is over.
                self._close("incomplete", out)
                out.append(self._lifecycle("response.queued", "queued"))
            case "running":
                out.append(self._lifecycle("response.in_progress", "in_progress"))
                self._opened(event.attempt, out)
            case _:
                pass  # cancelling: still in progress until the worker confirms

    def _done(self, event: Event, out: list[ResponseEvent]) -> None:
        self.ended = True
        status = objects.STATUSES[event.data["status"]]
        self._close("completed" if status == "completed" else "incomplete", out)
        if status == "completed":
            result = event.data["result"]
            response = self._head.response(
                "completed",
                output=self._last_output(text=result["text"]),
                usage=objects.usage(result.get("usage")),
                completed_at=int(event.at.timestamp()),
            )
            out.append({"type": "response.completed", "response": response})
        elif status == "failed":
            error = objects.error(event.data.get("error"))
            response = self._head.response("failed", output=self._last_output(), error=error)
            out.append({"type": "response.failed", "response": response})
        else:
            # No `response.cancelled` event exists; `response.incomplete` is the terminal event
            # that says "ended without its whole output", and the status says why.
            response = self._head.response("cancelled", output=self._last_output())
            out.append({"type": "response.incomplete", "response": response})

    def _opened(self, attempt: int, out: list[ResponseEvent]) -> _Item:
        """The item of `attempt`, opened now if it is not open yet."""
        if self._open is not None and self._open.attempt == attempt:
            return self._open
        self._close("incomplete", out)
        item = self._open = _Item(self._head, attempt)
        added = objects.message(self._head.job_id, attempt, None, "in_progress")
        out.append(
            {"type": "response.output_item.added", "output_index": item.index, "item": added}
        )
        out.append(
            self._part_event("response.content_part.added", item, part=objects.output_text(""))
        )
        return item

    def _close(self, status: ItemStatus, out: list[ResponseEvent]) -> None:
        item, self._open = self._open, None
        if item is None:
            return
        part = objects.output_text(item.text)
        out.append(self._part_event("response.output_text.done", item, text=item.text, logprobs=[]))
        out.append(self._part_event("response.content_part.done", item, part=part))
        done = objects.message(self._head.job_id, item.attempt, item.text, status)
        out.append({"type": "response.output_item.done", "output_index": item.index, "item": done})
        self._last = (item, status)

    def _last_output(self, text: str | None = None) -> list[dict[str, Any]]:
        """A terminal response's output: the item of the attempt that ended it (none if no
        attempt ran), with `text` for an accepted result (the job's `result.text`)."""
        if self._last is None:
            return []
        item, status = self._last
        return [
            objects.message(
                self._head.job_id, item.attempt, item.text if text is None else text, status
            )
        ]

    def _lifecycle(self, kind: str, status: objects.Status) -> ResponseEvent:
        # Before the end a lifecycle event carries no output: the SDK's helper takes the first
        # one's output as items already added, and the items arrive by their own events.
        return {"type": kind, "response": self._head.response(status)}

    @staticmethod
    def _part_event(kind: str, item: _Item, **fields: Any) -> ResponseEvent:
        """An event about the item's one content part, its text."""
        return {
            "type": kind, "item_id": item.id, "output_index": item.index, "content_index": 0,
            **fields,
        }  # fmt: skip


def _splits(event: Event, after: int) -> bool:
    """Is `event` a compacted run of tokens that the cursor `after` falls inside?"""
    first = event.data.get("from_seq") if event.type == "token" else None
    return isinstance(first, int) and first * STRIDE <= after < event.seq * STRIDE


def _expired() -> ResponseEvent:
    return {
        "type": "error", "code": "stream_expired", "param": None,
        "message": "This response's event log no longer holds the events after the cursor; "
        "GET the response for its state.",
    }  # fmt: skip
