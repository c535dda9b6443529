"""An event's SSE frame is built once and shared by every follower the hub hands it to."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from jobstream import sse
from jobstream.events import Event


def test_the_frame_is_the_events_json_with_its_seq_as_id_built_once() -> None:
    event = Event(7, "token", 1, {"text": "a\nb"}, datetime(2026, 1, 1, tzinfo=UTC))
    frame = event.sse_frame()
    assert frame is event.sse_frame()  # cached: a second follower gets the same bytes object
    [message] = sse.Parser().feed(frame.decode())
    assert isinstance(message, sse.Message)
    assert (message.event, message.id) == ("token", "7")
    assert orjson.loads(message.data) == event.to_json()


def test_the_cache_changes_neither_equality_nor_repr() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    built, fresh = Event(1, "done", 1, {}, at), Event(1, "done", 1, {}, at)
    built.sse_frame()
    assert built == fresh and repr(built) == repr(fresh)


def test_the_frame_is_what_the_generic_framer_makes_of_the_json() -> None:
    """The fast path writes the same bytes as sse.frame: line breaks in the text stay escaped
    inside one data line, and `at` reads as isoformat writes it."""
    at = datetime(2026, 1, 1, 12, 30, 5, 123456, tzinfo=UTC)
    for text in ("plain", "a\r\nb\rc\nd", "line\u2028sep", 'quote " and \\ back', ""):
        event = Event(42, "token", 3, {"text": text}, at)
        data = orjson.dumps(event.to_json()).decode()
        assert event.sse_frame() == sse.frame("token", data, id="42")
        [message] = sse.Parser().feed(event.sse_frame().decode())
        assert isinstance(message, sse.Message) and orjson.loads(message.data)["text"] == text
    on_the_second = Event(1, "done", 1, {"result": {"text": "x"}}, at.replace(microsecond=0))
    assert b'"at":"2026-01-01T12:30:05+00:00"' in on_the_second.sse_frame()
