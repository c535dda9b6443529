"""The chaos run's checks (tests/support/chaos_check.py) hold for a log as written and as
compacted, for followers that read either or both, and still find every gap, duplicate and wrong
text. The logs are the shape of tests/integration/test_retention.py's `retried_job`, as written
and as the janitor compacts it there."""

from __future__ import annotations

from typing import Any

from tests.support.chaos_check import follower_problems, log_problems

Event = dict[str, Any]
TEXT = "".join(f"{i} " for i in range(10))


def ev(seq: int, type_: str, attempt: int, **data: Any) -> Event:
    return {**data, "seq": seq, "type": type_, "attempt": attempt, "at": f"t{seq}"}


def written() -> list[Event]:
    """1 queued, 2-3 attempt 1 opens, 4-6 its tokens, 7-8 its error and the requeue, 9-10
    attempt 2 opens, 11-20 its tokens, 21 usage, 22 done."""
    return [
        ev(1, "status", 0, status="queued"),
        ev(2, "reset", 1),
        ev(3, "status", 1, status="running"),
        *(ev(4 + i, "token", 1, text=f"{i} ") for i in range(3)),
        ev(7, "attempt_error", 1, message="x"),
        ev(8, "status", 1, status="queued"),
        ev(9, "reset", 2),
        ev(10, "status", 2, status="running"),
        *(ev(11 + i, "token", 2, text=f"{i} ") for i in range(10)),
        ev(21, "usage", 2, output_tokens=10),
        ev(22, "done", 2, status="succeeded", result={"text": TEXT}),
    ]


def compacted() -> list[Event]:
    folded = {
        6: ev(6, "token", 1, text="", from_seq=4),
        14: ev(14, "token", 2, text="0 1 2 3 ", from_seq=11),
        18: ev(18, "token", 2, text="4 5 6 7 ", from_seq=15),
        20: ev(20, "token", 2, text="8 9 ", from_seq=19),
    }
    kept = [e for e in written() if e["type"] != "token"]
    return sorted([*kept, *folded.values()], key=lambda e: e["seq"])


def resync(first_seq: int, text: str = TEXT) -> Event:
    snapshot = {"last_seq": 22, "status": "succeeded", "output": {"text": text}}
    return {**ev(first_seq - 1, "resync", 2, first_seq=first_seq), "snapshot": snapshot}


def test_a_log_as_written_or_compacted_passes_and_followers_of_either_agree() -> None:
    for log in (written(), compacted()):
        assert log_problems(log, 22, "succeeded") == []
    # Live followers read it as written; late ones, compacted; both against either log.
    for seen in (written(), compacted()):
        assert follower_problems(seen, compacted(), 22) == []
    assert follower_problems(written(), written(), 22) == []
    # Read as written up to 10, then compacted from 11 on (the cursor was before the range).
    both = [*written()[:10], *[e for e in compacted() if e["seq"] > 10]]
    assert follower_problems(both, compacted(), 22) == []


def test_a_superseded_run_of_one_token_is_emptied_where_it_stands() -> None:
    # Attempt 1 wrote one token (seq 4); compaction leaves it at 4, empty, without from_seq.
    raw = [e for e in written() if e["seq"] not in (5, 6)]
    raw = [{**e, "seq": e["seq"] - 2} if e["seq"] > 6 else e for e in raw]
    last_seq = 20
    log = [{**e, "text": ""} if e["seq"] == 4 else e for e in raw]
    assert log_problems(log, last_seq, "succeeded") == []
    assert follower_problems(raw, log, last_seq) == []
    # Emptied, yes; before compaction other text, and after it another attempt's, no.
    other = [{**e, "text": "x "} if e["seq"] == 4 else e for e in raw]
    assert any("differs" in p for p in follower_problems(other, raw, last_seq))
    moved = [{**e, "attempt": 2} if e["seq"] == 4 else e for e in raw]
    assert any("differs" in p for p in follower_problems(moved, log, last_seq))


def test_a_follower_that_resynced_inside_a_range_agrees_through_the_snapshot() -> None:
    # It had 11 and 12, came back inside 11..14: resync to 15, the snapshot, nothing after.
    seen = [*written()[:12], resync(15)]
    assert follower_problems(seen, compacted(), 22) == []
    # A snapshot with other text is a wrong answer.
    seen = [*written()[:12], resync(15, text="0 1 ")]
    assert any("text" in p for p in follower_problems(seen, compacted(), 22))


def test_gaps_duplicates_and_wrong_text_are_found_in_any_shape() -> None:
    log = compacted()
    raw = written()
    gap = raw[:12] + raw[13:]
    assert any("(a gap)" in p for p in follower_problems(gap, log, 22))
    twice = raw[:12] + raw[11:]
    assert any("(a duplicate)" in p for p in follower_problems(twice, log, 22))
    # A compacted event received after the raw tokens it stands for.
    overlap = [*raw[:14], *[e for e in log if e["seq"] >= 14]]
    assert any("(a duplicate)" in p for p in follower_problems(overlap, log, 22))
    wrong = [{**e, "text": "x "} if e["seq"] == 12 else e for e in raw]
    assert any("text" in p for p in follower_problems(wrong, log, 22))
    assert any("differs" in p for p in follower_problems(wrong, raw, 22))
    # A token of another attempt where the log folded attempt 2's run.
    other = [{**e, "attempt": 1} if e["seq"] == 12 else e for e in raw]
    assert any("differs" in p for p in follower_problems(other, log, 22))
    # A follower that stopped short of the end, or whose non-token event differs.
    assert any("end at 21" in p for p in follower_problems(raw[:-1], log, 22))
    status = [{**e, "status": "failed"} if e["seq"] == 8 else e for e in raw]
    assert any("differs" in p for p in follower_problems(status, log, 22))
    # The log itself: a gap, a folded range that overlaps, a missing done.
    assert log_problems([e for e in log if e["seq"] != 21], 22, "succeeded") != []
    overlapping = [{**e, "from_seq": 13} if e["seq"] == 18 else e for e in log]
    assert any("duplicate" in p for p in log_problems(overlapping, 22, "succeeded"))
    assert any("done" in p for p in log_problems(log[:-1], 21, "succeeded"))
