"""A chaos run's checks of one job's log and of what each follower received, whichever of them
the janitor compacted (docs/streams.md#compacted-logs) and whenever.

A run longer than JOBSTREAM_COMPACT_AFTER_S meets three shapes of one log: as written (a follower
that read it live), compacted (the log read at the end, a late reader), or both (a follower that
read part of it before its compaction and the rest after). Compaction folds a run of token
events into one at the run's last seq, with `from_seq` its first (the text of the last attempt;
an earlier attempt's run becomes empty), and keeps every other event as it was. So:

- an event stands for the seqs from its `from_seq` (or its own seq) to its seq, and a log, or
  what a follower received, stands for 1..last_seq, each seq once and in order: no gap, no
  duplicate;
- what a follower received agrees with the log at every event the log still holds as it was; an
  event the log no longer holds as it was is a token of the same attempt inside one of its
  compacted ranges, or of a superseded attempt's run of one event, which compaction empties
  where it stands (no `from_seq`);
- a follower's text, as a client builds it (a reset clears it, a token appends, a `resync` takes
  the snapshot's), is the log's, which for a succeeded job is its result.

A follower that reconnects with a cursor inside a compacted range gets `resync`; it does what
the page and `jobstream follow` do: reads the snapshot and goes on from its `last_seq`. The
`resync` it received carries that snapshot (`snapshot`), which stands for every seq up to its
`last_seq`. Without compaction the checks are exact equality with the log.
"""

from __future__ import annotations

from typing import Any

Event = dict[str, Any]


def span(event: Event) -> tuple[int, int]:
    """The seqs an event stands for: a compacted token event's range, else its own seq."""
    if event["type"] == "token" and "from_seq" in event:
        return int(event["from_seq"]), int(event["seq"])
    return int(event["seq"]), int(event["seq"])


def compacted(events: list[Event]) -> bool:
    """Whether any of these events is a compacted one."""
    return any(e["type"] == "token" and "from_seq" in e for e in events)


def tiling_problem(events: list[Event], last_seq: int) -> str | None:
    """None when `events` stand for 1..last_seq, each seq once, in order; else what is wrong."""
    expected = 1  # the next seq to be accounted for
    for i, event in enumerate(events):
        if event["type"] == "resync":
            # The snapshot stands in for everything up to its last_seq (the skipped range's
            # end or later); a resync never goes back over what was received.
            resumed = int(event["snapshot"]["last_seq"])
            if event["first_seq"] < expected or resumed < event["first_seq"] - 1:
                return (
                    f"event {i}: a resync to {event['first_seq']} (snapshot at {resumed}) after"
                    f" {expected - 1} was received"
                )
            expected = resumed + 1
            continue
        first, last = span(event)
        if first < expected:
            return f"event {i}: seqs {first}..{last} again, after {expected - 1} (a duplicate)"
        if first > expected:
            return f"event {i}: seqs {expected}..{first - 1} missing before it (a gap)"
        expected = last + 1
    if expected != last_seq + 1:
        return f"they end at {expected - 1}, the log at {last_seq}"
    return None


def client_text(events: list[Event]) -> str:
    """The text a client builds: a reset clears it, a token appends, a resync takes the
    snapshot's (docs/streams.md)."""
    text = ""
    for event in events:
        if event["type"] == "reset":
            text = ""
        elif event["type"] == "token":
            text += event["text"]
        elif event["type"] == "resync":
            text = event["snapshot"]["output"]["text"]
    return text


def log_problems(log: list[Event], last_seq: int, status: str) -> list[str]:
    """The log as read now: it stands for 1..last_seq and ends with its done."""
    problems = []
    if (gap := tiling_problem(log, last_seq)) is not None:
        problems.append(f"the log is not 1..{last_seq} without gaps or duplicates: {gap}")
    if not log or log[-1]["type"] != "done" or log[-1]["status"] != status:
        problems.append(f"the log does not end with its done ({status})")
    return problems


def follower_problems(seen: list[Event], log: list[Event], last_seq: int) -> list[str]:
    """What a follower received, against the job's log as read at the end (`log`, which
    log_problems passed)."""
    problems = []
    if (gap := tiling_problem(seen, last_seq)) is not None:
        problems.append(f"a follower's events are not 1..{last_seq} each once: {gap}")
    if (differs := _disagreement(seen, log)) is not None:
        problems.append(f"a follower saw {len(seen)} events, the log has {len(log)}; {differs}")
    text, kept = client_text(seen), client_text(log)
    if text != kept:
        at = next((i for i, (a, b) in enumerate(zip(text, kept, strict=False)) if a != b), None)
        problems.append(
            f"a follower's text is not the log's ({len(text)} against {len(kept)} characters,"
            f" first difference at {at})"
        )
    if not seen:
        problems.append("a follower received nothing")
    elif seen[-1]["type"] == "resync":
        # Resumed past the end from the snapshot, as a client does: its status is the job's.
        if seen[-1]["snapshot"]["status"] != log[-1]["status"]:
            problems.append(f"a follower's snapshot says {seen[-1]['snapshot']['status']}")
    elif seen[-1] != log[-1]:
        problems.append(f"a follower's last event is {seen[-1]}, the log's {log[-1]}")
    return problems


def _disagreement(seen: list[Event], log: list[Event]) -> str | None:
    """Where a follower's events part from the log's (None: nowhere)."""
    held = {e["seq"]: e for e in log}
    ranges = [(span(e), e) for e in log if e["type"] == "token" and "from_seq" in e]
    for i, event in enumerate(seen):
        if event["type"] == "resync" or held.get(event["seq"]) == event:
            continue
        # Only a token the janitor has rewritten since the follower received it may differ: it
        # lies inside a compacted range of its attempt, or it was a superseded attempt's run of
        # one event, emptied where it stands. A compacted event is never rewritten again.
        kept = held.get(event["seq"])
        into = next((e for (lo, hi), e in ranges if lo <= event["seq"] <= hi), None)
        if into is None and kept is not None and kept["type"] == "token" and kept["text"] == "":
            into = kept
        if (
            event["type"] == "token"
            and "from_seq" not in event
            and into is not None
            and into["attempt"] == event["attempt"]
        ):
            continue
        return f"event {i} differs: the follower saw {event}, the log holds {kept or into}"
    return None
