"""server/v1/mapping.py: a job's log told as the Responses stream, and held to what the official
SDK's strict stream helper accepts (its own state machine, fed our events)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, cast

import openai
import pytest
from openai._models import construct_type
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent

from jobstream.events import Event
from jobstream.server.v1.mapping import STRIDE, ResponseEvent, ResponseEvents
from jobstream.server.v1.objects import Head

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
JOB = uuid.UUID("00000000-0000-0000-0000-0000000000aa")
HEAD = Head(JOB, int(AT.timestamp()), "m", None, 8, None, None, {})
USAGE = {"input_tokens": 2, "output_tokens": 3, "cost": "0.1", "cost_known": True}


def log(*events: tuple[str, int, dict[str, Any]]) -> list[Event]:
    return [
        Event(seq, kind, attempt, data, AT) for seq, (kind, attempt, data) in enumerate(events, 1)
    ]


def queued(attempt: int = 0, **data: Any) -> tuple[str, int, dict[str, Any]]:
    return ("status", attempt, {"status": "queued", **data})


def attempt(n: int, *tokens: str) -> list[tuple[str, int, dict[str, Any]]]:
    return [
        ("reset", n, {"reason": "first attempt" if n == 1 else "retry"}),
        ("status", n, {"status": "running"}),
        *(("token", n, {"text": token}) for token in tokens),
    ]


def succeeded(n: int, text: str) -> tuple[str, int, dict[str, Any]]:
    return ("done", n, {"status": "succeeded", "result": {"text": text, "usage": USAGE}})


RETRIED = log(
    queued(),
    *attempt(1, "a ", "b "),
    ("attempt_error", 1, {"class": "transient", "message": "HTTP 500"}),
    queued(1, retry_at="soon", error={"class": "transient", "message": "HTTP 500"}),
    *attempt(2, "c ", "d "),
    ("usage", 2, USAGE),
    succeeded(2, "c d "),
)
# A worker died mid-attempt: no attempt_error, the next attempt's reset is all that follows.
LOST = log(queued(), *attempt(1, "a "), *attempt(2, "x ", "y "), succeeded(2, "x y "))
# A graceful shutdown handed the attempt back to the queue.
HANDED_BACK = log(
    queued(), *attempt(1, "a "), queued(1, error={"class": "interrupted", "message": "bye"}),
    *attempt(2, "z "), succeeded(2, "z "),
)  # fmt: skip
FAILED = log(
    queued(), *attempt(1, "a "), ("attempt_error", 1, {"class": "permanent", "message": "400"}),
    ("done", 1, {"status": "failed", "error": {"class": "permanent", "message": "HTTP 400"}}),
)  # fmt: skip
CANCELLED_RUNNING = log(
    queued(), *attempt(1, "a "), ("status", 1, {"status": "cancelling"}),
    ("done", 1, {"status": "cancelled", "error": {"class": "cancelled", "message": "asked"}}),
)  # fmt: skip
CANCELLED_QUEUED = log(queued(), ("done", 0, {"status": "cancelled"}))
LOGS = {
    "retried": RETRIED, "lost": LOST, "handed_back": HANDED_BACK, "failed": FAILED,
    "cancelled_running": CANCELLED_RUNNING, "cancelled_queued": CANCELLED_QUEUED,
}  # fmt: skip


def told(events: list[Event], after: int = -1) -> list[ResponseEvent]:
    fold = ResponseEvents(HEAD, starting_after=after)
    return [out for event in events for out in fold.feed(event)]


def text_of(stream: list[ResponseEvent]) -> str:
    return "".join(e["delta"] for e in stream if e["type"] == "response.output_text.delta")


def compacted(events: list[Event]) -> list[Event]:
    """`events` as retention leaves a finished job's log: each run of token events folded into
    its last, which names the first as `from_seq`; an earlier attempt's run left empty."""
    last_attempt = events[-1].attempt
    out: list[Event] = []
    run: list[Event] = []
    for event in [*events, Event(0, "end", 0, {}, AT)]:
        if event.type == "token":
            run.append(event)
            continue
        if run:
            text = "".join(e.data["text"] for e in run) if run[0].attempt == last_attempt else ""
            data = {"text": text, "from_seq": run[0].seq}
            out.append(Event(run[-1].seq, "token", run[-1].attempt, data, AT))
            run = []
        if event.type != "end":
            out.append(event)
    return out


def through_the_sdk(stream: list[ResponseEvent]) -> ResponseStreamState[None]:
    """What the SDK's `client.responses.stream(...)` helper makes of the stream: it raises on
    a duplicate output index, an item left open, or a missing response.created."""
    state: ResponseStreamState[None] = ResponseStreamState(
        text_format=openai.omit, input_tools=openai.omit
    )
    for data in stream:
        event = cast(ResponseStreamEvent, construct_type(type_=ResponseStreamEvent, value=data))
        state.handle_event(event)
    return state


@pytest.mark.parametrize("name", list(LOGS))
def test_numbers_rise_strictly_and_a_replay_numbers_the_same(name: str) -> None:
    first, again = told(LOGS[name]), told(LOGS[name])
    numbers = [e["sequence_number"] for e in first]
    assert numbers == sorted(set(numbers))
    assert first == again
    # Each event is numbered within its log event's block: resuming maps back to a seq.
    seqs = {e.seq for e in LOGS[name]}
    assert {n // STRIDE for n in numbers} <= seqs
    assert first[0]["type"] == "response.created"


@pytest.mark.parametrize("name", ["retried", "lost", "handed_back"])
def test_each_attempt_is_an_item_and_only_the_accepted_one_completes(name: str) -> None:
    stream = told(LOGS[name])
    done = [
        (e["output_index"], e["item"]["status"]) for e in stream if e["type"].endswith("item.done")
    ]
    assert done == [(0, "incomplete"), (1, "completed")]
    final = through_the_sdk(stream)._completed_response
    assert final is not None
    result = LOGS[name][-1].data["result"]["text"]
    assert final.output_text == result
    assert [item.id for item in final.output] == [f"msg_{JOB.hex}_2"]  # type: ignore[union-attr]
    assert final.usage is not None and final.usage.total_tokens == 5


def test_a_failed_attempt_item_holds_the_text_it_wrote() -> None:
    closing = [e for e in told(RETRIED) if e["type"] == "response.output_text.done"]
    assert [e["text"] for e in closing] == ["a b ", "c d "]


@pytest.mark.parametrize(
    ("name", "last_type", "status"),
    [
        ("failed", "response.failed", "failed"),
        ("cancelled_running", "response.incomplete", "cancelled"),
        ("cancelled_queued", "response.incomplete", "cancelled"),
    ],
)
def test_an_unaccepted_end_is_its_terminal_event(name: str, last_type: str, status: str) -> None:
    stream = told(LOGS[name])
    through_the_sdk(stream)  # accepted by the strict helper
    last = stream[-1]
    assert (last["type"], last["response"]["status"]) == (last_type, status)
    assert "error" not in last  # only an `error` event may carry one: the SDK raises on it
    if status == "failed":
        assert last["response"]["error"]["code"] == "server_error"


def test_a_pruned_log_is_an_error_event_and_the_end() -> None:
    fold = ResponseEvents(HEAD)
    [created, error] = fold.feed(Event(41, "resync", 0, {"first_seq": 42}, AT))
    assert created["type"] == "response.created"
    assert (error["type"], error["code"]) == ("error", "stream_expired")
    assert fold.ended


@pytest.mark.parametrize("name", list(LOGS))
def test_a_reader_after_n_gets_exactly_the_events_numbered_above_n(name: str) -> None:
    whole = told(LOGS[name])
    for n in (-1, *(e["sequence_number"] for e in whole)):
        assert told(LOGS[name], after=n) == [e for e in whole if e["sequence_number"] > n]


def test_a_compacted_log_tells_the_same_text_unless_the_cursor_is_inside_a_run() -> None:
    log_ = compacted(RETRIED)
    whole = told(RETRIED)
    final = through_the_sdk(told(log_))._completed_response
    assert final is not None and final.output_text == "c d "
    [run] = [e for e in log_ if e.attempt == 2 and e.type == "token"]
    before = run.data["from_seq"] * STRIDE - 1  # the reader saw nothing of the run
    assert text_of(told(log_, after=before)) == text_of(
        [e for e in whole if e["sequence_number"] > before]
    )
    inside = run.data["from_seq"] * STRIDE  # the reader saw the run's first delta
    assert [(e["type"], e["code"]) for e in told(log_, after=inside)] == [
        ("error", "stream_expired")
    ]
