"""server/ui_message_stream.py: a job's log told as one assistant message of the Vercel AI SDK's
UI message stream, and the retry rule (docs/chat.md). The SDK's own parser and client read what
the server sends in tests/e2e/test_chat_sdk.py; here, every way a log can go."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import orjson

from jobstream.events import Event
from jobstream.server.ui_message_stream import UIMessageChunks, finished, frames

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
JOB = uuid.UUID("00000000-0000-0000-0000-0000000000aa")
USAGE = {"input_tokens": 2, "output_tokens": 3, "cost": "0.1", "cost_known": True}

Spec = tuple[str, int, dict[str, Any]]


def log(*specs: Spec | list[Spec]) -> list[Event]:
    flat = [s for spec in specs for s in (spec if isinstance(spec, list) else [spec])]
    return [
        Event(seq, kind, attempt, data, AT) for seq, (kind, attempt, data) in enumerate(flat, 1)
    ]


def attempt(n: int, *tokens: str) -> list[Spec]:
    return [
        ("reset", n, {"reason": "retry"}),
        ("status", n, {"status": "running"}),
        *(("token", n, {"text": token}) for token in tokens),
    ]


def retry(n: int) -> list[Spec]:
    error = {"class": "transient", "message": "busy"}
    return [("attempt_error", n, error), ("status", n, {"status": "queued", "error": error})]


def succeeded(n: int, text: str) -> Spec:
    return ("done", n, {"status": "succeeded", "result": {"text": text, "usage": USAGE}})


def tell(events: list[Event], *, from_attempt: int = 1, batch: int = 1) -> list[dict[str, Any]]:
    """What a stream opened when the job was at `from_attempt` tells, the log read `batch`
    events at a time."""
    told = UIMessageChunks(JOB, from_attempt=from_attempt)
    chunks = told.opening()
    for i in range(0, len(events), batch):
        chunks += told.feed(events[i : i + batch])
    return chunks


def text(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["delta"] for c in chunks if c["type"] == "text-delta")


def kinds(chunks: list[dict[str, Any]]) -> list[str]:
    return [c["type"] for c in chunks]


QUEUED: Spec = ("status", 0, {"status": "queued"})


def test_a_success_is_one_text_part_between_start_and_finish() -> None:
    chunks = tell(log(QUEUED, attempt(1, "Hel", "lo"), succeeded(1, "Hello")))
    assert kinds(chunks) == [
        "start", "start-step", "text-start", "text-delta", "text-delta", "text-end",
        "finish-step", "finish",
    ]  # fmt: skip
    assert chunks[0] == {
        "type": "start", "messageId": str(JOB), "messageMetadata": {"jobId": str(JOB)}
    }  # fmt: skip
    assert {c["id"] for c in chunks if c["type"].startswith("text-")} == {"text-1"}
    assert text(chunks) == "Hello"
    assert chunks[-1] == {
        "type": "finish", "finishReason": "stop",
        "messageMetadata": {
            "jobId": str(JOB), "status": "succeeded", "attempts": 1,
            "usage": {"inputTokens": 2, "outputTokens": 3, "totalTokens": 5},
            "costUsd": "0.1", "costKnown": True,
        },
    }  # fmt: skip


def test_a_retry_after_told_text_ends_the_stream_with_an_error_to_reconnect_on() -> None:
    head = log(QUEUED, attempt(1, "Hel"))
    rest = log(QUEUED, attempt(1, "Hel"), retry(1), attempt(2, "Hello"), succeeded(2, "Hello"))
    told = UIMessageChunks(JOB, from_attempt=1)
    told.feed(head)  # the first attempt's text is out
    chunks = told.feed(rest[len(head) :])  # then its failure, the retry and its end, at once
    assert kinds(chunks) == ["text-end", "data-resume", "error"]  # nothing of the second
    assert chunks[1] == {
        "type": "data-resume", "data": {"reason": "retry", "jobId": str(JOB)}, "transient": True,
    }  # fmt: skip
    assert "Reconnect" in chunks[2]["errorText"]
    assert told.ended and told.feed(rest) == []
    # Event by event: the same end, right after the first attempt's text.
    whole = tell(rest)
    assert text(whole) == "Hel" and kinds(whole)[-3:] == ["text-end", "data-resume", "error"]


def test_a_retry_before_any_text_was_told_goes_on_with_the_next_attempt() -> None:
    events = log(QUEUED, attempt(1), retry(1), attempt(2, "Hel", "lo"), succeeded(2, "Hello"))
    chunks = tell(events)
    assert text(chunks) == "Hello" and "error" not in kinds(chunks)
    assert {c["id"] for c in chunks if c["type"].startswith("text-")} == {"text-2"}


def test_text_of_an_attempt_known_to_be_over_is_never_told() -> None:
    events = log(QUEUED, attempt(1, "Hel"), retry(1), attempt(2, "Hello"), succeeded(2, "Hello"))
    # Opened while the second attempt ran: the first's text is skipped.
    assert text(tell(events, from_attempt=2)) == "Hello"
    # Read in one batch that shows the first attempt over: skipped too, no cut.
    chunks = tell(events, batch=100)
    assert text(chunks) == "Hello" and kinds(chunks)[-1] == "finish"
    # A reset of a new attempt with no queued status before it (a worker lost, reaped late).
    lost = log(QUEUED, attempt(1, "Hel"), attempt(2, "Hello"), succeeded(2, "Hello"))
    assert kinds(tell(lost))[-2:] == ["data-resume", "error"]
    assert text(tell(lost, batch=100)) == "Hello"


def test_the_last_attempt_of_a_failed_job_keeps_its_text_and_the_error_ends_it() -> None:
    error = {"class": "permanent", "message": "refused"}
    events = log(
        QUEUED, attempt(1, "Hel"), ("attempt_error", 1, error),
        ("done", 1, {"status": "failed", "error": error}),
    )  # fmt: skip
    chunks = tell(events)
    assert text(chunks) == "Hel"
    assert kinds(chunks)[-4:] == ["text-end", "error", "finish-step", "finish"]
    assert chunks[-3] == {"type": "error", "errorText": "refused"}
    assert chunks[-1]["finishReason"] == "error"
    assert chunks[-1]["messageMetadata"]["error"] == error


def test_a_cancel_aborts_the_message() -> None:
    events = log(QUEUED, attempt(1, "Hel"), ("status", 1, {"status": "cancelling"}),
                 ("done", 1, {"status": "cancelled"}))  # fmt: skip
    chunks = tell(events)
    assert kinds(chunks)[-4:] == ["text-end", "finish-step", "abort", "finish"]
    assert chunks[-1]["messageMetadata"]["status"] == "cancelled"


def test_progress_is_one_data_part_updated_in_place() -> None:
    events = log(
        QUEUED, attempt(1), ("progress", 1, {"fraction": 0.5, "message": "half"}),
        ("token", 1, {"text": "x"}), ("progress", 1, {"fraction": 1.0, "message": None}),
        succeeded(1, "x"),
    )  # fmt: skip
    progress = [c for c in tell(events) if c["type"] == "data-progress"]
    assert progress == [
        {"type": "data-progress", "id": "progress", "data": {"fraction": 0.5, "message": "half"}},
        {"type": "data-progress", "id": "progress", "data": {"fraction": 1.0, "message": None}},
    ]


def test_text_a_result_holds_and_the_log_does_not_is_told_before_the_end() -> None:
    returned = tell(log(QUEUED, attempt(1), succeeded(1, "you said: hi")))
    assert text(returned) == "you said: hi"
    partly = tell(log(QUEUED, attempt(1, "you "), succeeded(1, "you said: hi")))
    assert text(partly) == "you said: hi"
    assert len([c for c in partly if c["type"] == "text-start"]) == 1


def test_a_stream_cut_short_says_so_and_asks_for_a_reconnect() -> None:
    told = UIMessageChunks(JOB, from_attempt=1)
    told.feed(log(QUEUED, attempt(1, "Hel")))
    chunks = told.interrupted()
    assert kinds(chunks) == ["text-end", "data-resume", "error"]
    assert chunks[1]["data"]["reason"] == "interrupted"
    assert told.ended and told.interrupted() == []


def test_an_ended_job_is_told_whole_from_its_row() -> None:
    done = {"status": "succeeded", "result": {"text": "Hello", "usage": USAGE}}
    chunks = finished(JOB, 2, done, "Hello")
    assert kinds(chunks) == [
        "start", "start-step", "text-start", "text-delta", "text-end", "finish-step", "finish",
    ]  # fmt: skip
    assert text(chunks) == "Hello"
    assert chunks[-1]["messageMetadata"]["attempts"] == 2
    cancelled_while_queued = finished(JOB, 0, {"status": "cancelled"}, "")
    assert "text-start" not in kinds(cancelled_while_queued)


def test_frames_are_one_data_line_each() -> None:
    chunk = {"type": "text-delta", "id": "text-1", "delta": "a\nb\r\nc\u2028"}
    framed = frames([chunk, chunk])
    assert framed.count(b"\n\n") == 2
    for frame in framed.split(b"\n\n")[:2]:
        assert frame.startswith(b"data: ") and b"\n" not in frame
        assert orjson.loads(frame.removeprefix(b"data: ")) == chunk
