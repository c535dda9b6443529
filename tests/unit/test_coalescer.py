from __future__ import annotations

from jobstream.worker.coalescer import Coalescer


def test_nothing_pending_means_nothing_due() -> None:
    c = Coalescer(interval_s=0.05, max_bytes=100)
    assert c.due_at is None
    assert c.take() == []


def test_the_first_pending_delta_starts_the_interval() -> None:
    c = Coalescer(interval_s=0.05, max_bytes=100)
    assert c.add("a", now=10.0) is False
    assert c.add("b", now=10.04) is False
    assert c.due_at == 10.05  # from the oldest delta, not the newest
    assert c.add("c", now=10.05) is True  # deltas back to back: the deadline passed meanwhile
    assert c.take() == ["abc"]
    assert c.due_at is None
    c.add("d", now=11.0)
    assert c.due_at == 11.05


def test_enough_bytes_ask_for_a_flush_at_once() -> None:
    c = Coalescer(interval_s=10, max_bytes=4)
    assert c.add("ab", now=0) is False
    assert c.add("é", now=0) is True  # bytes, not characters: 2 + 2
    assert c.take() == ["abé"]


def test_deltas_past_a_full_chunk_start_the_next_one() -> None:
    # Deltas read in one batch (or while a write was under way) are written at once, but as
    # chunks of at most max_bytes each: an event stays bounded.
    c = Coalescer(interval_s=10, max_bytes=4)
    for delta in ["ab", "cd", "e", "fgh", "ijklmn", "o"]:
        c.add(delta, now=0)
    assert c.take() == ["abcd", "efgh", "ijklmn", "o"]  # a larger delta stays whole


def test_a_failed_flush_keeps_its_text_first_in_line() -> None:
    c = Coalescer(interval_s=0.05, max_bytes=100)
    c.add("one ", now=0)
    chunks = c.take()
    c.add("two ", now=1)
    c.put_back(chunks, now=2)
    assert c.due_at == 2.05
    assert "".join(c.take()) == "one two "


def test_output_and_delta_count_include_unflushed_text() -> None:
    c = Coalescer(interval_s=0.05, max_bytes=100)
    for word in ["a ", "b ", "", "c "]:
        c.add(word, now=0)
    c.take()
    c.add("d ", now=0)
    assert c.output == "a b c d "
    assert c.deltas == 5
