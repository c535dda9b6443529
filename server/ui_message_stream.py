"""A job told as one assistant message of the Vercel AI SDK's UI message stream (docs/chat.md).

The stream's parts ("chunks") are what `DefaultChatTransport` parses with the SDK's own schema
and `useChat` folds into a message: `start` (the message's id, the job's), `start-step`, the
text as `text-start` / `text-delta` / `text-end`, `data-progress` for the job's progress,
`finish-step` and `finish` (its metadata: the job, its usage and cost), or `error` for a failed
job, then `[DONE]`.

A client folds text parts by appending: no part takes text back. So the text of an attempt that
is over is never told once a later attempt is known (`UIMessageChunks.from_attempt`), and when an
attempt ends *after* some of its text was told (a retry, a hand-back, a lost worker), the stream
tells why and ends with `error` there: the client's copy holds text that is not the answer. Its
reconnect (`GET /api/chat/{id}/stream`, which useChat reads as a replay of the whole message)
then tells the later attempt's text alone. That is the retry rule of docs/chat.md.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from jobstream.events import Event

Chunk = dict[str, Any]

DONE = b"data: [DONE]\n\n"
# The response headers of a UI message stream (the SDK's UI_MESSAGE_STREAM_HEADERS, but for the
# ones every SSE answer here carries already: server/event_stream.py).
HEADER = (b"x-vercel-ai-ui-message-stream", b"v1")
PROGRESS_ID = "progress"  # one data part, updated in place as the job reports progress
# The transient part that comes before an `error` the client should answer by reconnecting.
RESUME = "data-resume"


def message_id(job_id: uuid.UUID) -> str:
    """The assistant message's id: the job's, so that a client can read the job by it."""
    return str(job_id)


def frames(chunks: list[Chunk]) -> bytes:
    """Chunks as SSE frames: `data:` and the chunk's JSON, one line (orjson escapes every line
    break), no `event:`: the SDK's parser reads `data` alone."""
    return b"".join([b"data: %s\n\n" % orjson.dumps(chunk) for chunk in chunks])


class UIMessageChunks:
    """The chunks that a job's log, fed from its start, becomes.

    `from_attempt`: the first attempt whose text may be told; what the caller knows of the job
    (its attempt now, or the next one if it is queued for a retry) says which attempts are over
    before the log is read.
    """

    def __init__(self, job_id: uuid.UUID, *, from_attempt: int) -> None:
        self._job_id = job_id
        self._from = from_attempt
        self._open: int | None = None  # the attempt whose text part is open: its text was told
        self._text_told = ""  # the open attempt's text so far
        self.ended = False  # the last chunk was told: nothing follows

    def opening(self) -> list[Chunk]:
        return [
            {"type": "start", "messageId": message_id(self._job_id),
             "messageMetadata": {"jobId": str(self._job_id)}},
            {"type": "start-step"},
        ]  # fmt: skip

    def feed(self, batch: list[Event]) -> list[Chunk]:
        """The chunks of a batch of events, read in the log's order."""
        if self._open is None:
            # An attempt that the batch shows over has text not worth telling: none of it was.
            self._from = max(self._from, _later_attempt(batch))
        out: list[Chunk] = []
        for event in batch:
            if self.ended:
                break  # a log may hold events after its end (an old log's operator retry)
            self._event(event, out)
        return out

    def interrupted(self) -> list[Chunk]:
        """The stream ends before the job (the server stops, or the reader fell behind): the
        client's message is not whole, and a reconnect goes on with it."""
        if self.ended:
            return []
        out = self._close()
        self._cut(out, "interrupted", "The stream was interrupted before the job ended.")
        return out

    def _event(self, event: Event, out: list[Chunk]) -> None:
        match event.type:
            case "token":
                self._text(event, out)
            case "status" if event.data["status"] == "queued" and event.attempt > 0:
                # Back in the queue after attempt `event.attempt`: a retry, a hand-back, a lost
                # worker. Its text is not the answer.
                self._over(event.attempt + 1, out)
            case "reset":
                self._over(event.attempt, out)
            case "progress" if event.attempt >= self._from:
                data = {"fraction": event.data["fraction"], "message": event.data.get("message")}
                out.append({"type": "data-progress", "id": PROGRESS_ID, "data": data})
            case "done":
                self._done(event, out)
            case "resync":
                # The log's start was pruned (a job retention compacted meanwhile).
                out += self._close()
                out.append({"type": "error", "errorText": "This job's log no longer holds its "
                            "text: read the job (GET /api/jobs/{id}) for its result."})  # fmt: skip
                self.ended = True
            case _:
                pass  # running, cancelling, usage, attempt_error: the end tells what matters

    def _text(self, event: Event, out: list[Chunk]) -> None:
        attempt = event.attempt
        if attempt < self._from:
            return  # an attempt known to be over
        if self._open is not None and self._open != attempt:
            self._over(attempt, out)  # no reset between them: not in a log as written
            if self.ended:
                return
        self._tell(attempt, event.data["text"], out)

    def _tell(self, attempt: int, text: str, out: list[Chunk]) -> None:
        if self._open is None:
            self._open, self._text_told = attempt, ""
            out.append({"type": "text-start", "id": _part_id(attempt)})
        self._text_told += text
        out.append({"type": "text-delta", "id": _part_id(attempt), "delta": text})

    def _over(self, next_attempt: int, out: list[Chunk]) -> None:
        """Attempts before `next_attempt` are over without their text being the answer."""
        told = self._open
        if told is not None and told < next_attempt:
            out += self._close()
            self._cut(
                out, "retry",
                f"Attempt {told} of job {self._job_id} ended after writing text, and the job "
                "goes on with another attempt: this text is not its answer. Reconnect "
                "(resumeStream) for the message from its start.",
            )  # fmt: skip
        self._from = max(self._from, next_attempt)

    def _cut(self, out: list[Chunk], reason: str, text: str) -> None:
        # Transient: the client's onData hears it, its message keeps nothing of it.
        resume = {"reason": reason, "jobId": str(self._job_id)}
        out.append({"type": RESUME, "data": resume, "transient": True})
        out.append({"type": "error", "errorText": text})
        self.ended = True

    def _close(self) -> list[Chunk]:
        attempt, self._open = self._open, None
        return [] if attempt is None else [{"type": "text-end", "id": _part_id(attempt)}]

    def _done(self, event: Event, out: list[Chunk]) -> None:
        result = event.data.get("result") or {}
        accepted = result.get("text") if event.data["status"] == "succeeded" else None
        told = self._text_told if self._open is not None else ""
        if accepted and accepted != told and accepted.startswith(told):
            # Text the result holds and the log does not: a job of the app's that returned its
            # text rather than emitting it.
            self._tell(event.attempt, accepted[len(told) :], out)
        out += self._close()
        out += ending(self._job_id, event.attempt, event.data)
        self.ended = True


def ending(job_id: uuid.UUID, attempts: int, done: dict[str, Any]) -> list[Chunk]:
    """The chunks that end the message of a job that ended: `done`'s data (its status, and its
    result or error), after its text."""
    status: str = done["status"]
    metadata: dict[str, Any] = {"jobId": str(job_id), "status": status, "attempts": attempts}
    result = done.get("result")
    if status == "succeeded" and result is not None:
        metadata |= _usage(result.get("usage"))
        return [
            {"type": "finish-step"},
            {"type": "finish", "finishReason": "stop", "messageMetadata": metadata},
        ]
    if status == "cancelled":
        return [
            {"type": "finish-step"},
            {"type": "abort", "reason": "cancelled"},
            {"type": "finish", "finishReason": "other", "messageMetadata": metadata},
        ]
    error = done.get("error") or {}
    metadata["error"] = {"class": error.get("class"), "message": error.get("message")}
    return [
        {"type": "error", "errorText": str(error.get("message") or f"The job {status}.")},
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "error", "messageMetadata": metadata},
    ]


def finished(
    job_id: uuid.UUID,
    attempts: int,
    done: dict[str, Any],
    text: str,
) -> list[Chunk]:
    """The whole message of a job that has ended, from its row: its accepted text (or its last
    attempt's) in one delta, then its end. The same message its live stream ended with, without
    reading a log that retention may have compacted."""
    chunks = UIMessageChunks(job_id, from_attempt=attempts).opening()
    if text:
        part = _part_id(attempts)
        chunks += [
            {"type": "text-start", "id": part},
            {"type": "text-delta", "id": part, "delta": text},
            {"type": "text-end", "id": part},
        ]
    return chunks + ending(job_id, attempts, done)


def _part_id(attempt: int) -> str:
    # One text part per attempt: a client holds a part's id until the part ends.
    return f"text-{attempt}"


def _later_attempt(batch: list[Event]) -> int:
    """The latest attempt that `batch` shows started or due: text of attempts before it is not
    the answer (0: none)."""
    latest = 0
    for event in batch:
        if event.type == "reset":
            latest = max(latest, event.attempt)
        elif event.type == "status" and event.data["status"] == "queued" and event.attempt > 0:
            latest = max(latest, event.attempt + 1)
    return latest


def _usage(usage: dict[str, Any] | None) -> dict[str, Any]:
    """A result's usage and cost as message metadata, in the SDK's names for usage."""
    if not usage:
        return {}
    given, made = int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
    return {
        "usage": {"inputTokens": given, "outputTokens": made, "totalTokens": given + made},
        "costUsd": usage.get("cost"),
        "costKnown": usage.get("cost_known", True),
    }
