"""The OpenAI provider's SSE decoder, which reads the stream's raw bytes as they arrive (the
provider no longer reads lines through httpx): every way a body may be cut into reads, and the
line endings the SSE format allows."""

from __future__ import annotations

import pytest

from jobstream.worker.providers.sse_bytes import SseDecoder

BODY = (
    b": keep-alive\n\n"
    b'data: {"a": 1}\n\n'
    b"event: ignored\nid: 7\nretry: 10\n"
    b'data: {"b":\ndata: 2}\n\n'
    b"data:[DONE]\n\n"
)
EVENTS = [b'{"a": 1}', b'{"b":\n2}', b"[DONE]"]


def decode(pieces: list[bytes]) -> list[bytes]:
    decoder = SseDecoder()
    events = [data for piece in pieces for data in decoder.feed(piece)]
    return events + decoder.finish()


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"])
def test_every_split_into_two_reads_gives_the_same_events(ending: bytes) -> None:
    body = BODY.replace(b"\n", ending)
    for cut in range(len(body) + 1):
        assert decode([body[:cut], body[cut:]]) == EVENTS, cut


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"])
def test_a_byte_at_a_time_gives_the_same_events(ending: bytes) -> None:
    body = BODY.replace(b"\n", ending)
    assert decode([body[i : i + 1] for i in range(len(body))]) == EVENTS


def test_the_end_of_the_body_completes_its_last_event() -> None:
    # A server that ends the body without the blank line (or the line's end) still sent it.
    assert decode([b'data: {"a": 1}\n']) == [b'{"a": 1}']
    assert decode([b'data: {"a": 1}']) == [b'{"a": 1}']
    assert decode([b"data: x\n\n", b""]) == [b"x"]
    assert decode([]) == []


def test_a_data_field_without_a_colon_is_an_empty_line_of_data() -> None:
    assert decode([b"data\ndata: x\n\n"]) == [b"\nx"]
