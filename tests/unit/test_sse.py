"""The SSE wire format: our frames, parsed back the way EventSource parses them."""

from __future__ import annotations

import orjson
import pytest

from jobstream import sse


def parse(*chunks: str) -> list[sse.Item]:
    parser = sse.Parser()
    return [item for chunk in chunks for item in parser.feed(chunk)]


def test_a_frame_round_trips() -> None:
    raw = (sse.retry(1000) + sse.frame("token", '{"a": 1}', id="7") + sse.comment("hb")).decode()
    assert parse(raw) == [
        sse.Retry(1000),
        sse.Message("token", '{"a": 1}', "7"),
        sse.Comment("hb"),
    ]


def test_multi_line_data_is_one_data_field_per_line() -> None:
    assert parse(sse.frame("x", "a\nb").decode()) == [sse.Message("x", "a\nb", None)]


def test_unicode_line_separators_in_a_token_survive_the_frame() -> None:
    # str.splitlines also splits on U+2028, U+2029 and NEL, which JSON leaves unescaped and SSE
    # does not treat as line ends: the frame cut the token there, and the client read a newline.
    data = orjson.dumps({"text": "a\u2028b\u2029c\x85d"}).decode()
    assert parse(sse.frame("token", data, id="1").decode()) == [sse.Message("token", data, "1")]


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_every_line_ending_and_any_split(newline: str) -> None:
    raw = newline.join(["id: 3", "event: token", "data: hi", "", ": c", "", "data: two", "", ""])
    expected = [
        sse.Message("token", "hi", "3"),
        sse.Comment("c"),
        sse.Message("message", "two", "3"),
    ]
    for cut in range(len(raw)):
        assert parse(raw[:cut], raw[cut:]) == expected, cut


def test_the_last_id_stays_in_force_and_a_nul_id_is_ignored() -> None:
    items = parse("id: 5\ndata: a\n\nid: 6\0\ndata: b\n\n")
    assert items == [sse.Message("message", "a", "5"), sse.Message("message", "b", "5")]


def test_an_event_without_data_is_not_dispatched() -> None:
    assert parse("event: token\n\nretry: x\n\n") == []
