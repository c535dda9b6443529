from __future__ import annotations

import random

import pytest

from jobstream.types import ErrorKind
from jobstream.worker.retry import Backoff, Decision, decide

BACKOFF = Backoff(base_s=1.0, max_s=30.0)


def decision(
    kind: ErrorKind,
    *,
    retry_after_s: float | None = None,
    retry_unknown: bool = False,
    exhausted: bool = False,
    attempt: int = 1,
    seed: int = 7,
) -> Decision:
    return decide(
        kind,
        retry_after_s=retry_after_s,
        retry_unknown=retry_unknown,
        exhausted=exhausted,
        attempt=attempt,
        backoff=BACKOFF,
        rng=random.Random(seed),
    )


@pytest.mark.parametrize("kind", ["transient", "rate_limited"])
def test_transient_and_rate_limited_retry_with_a_failed_outcome(kind: ErrorKind) -> None:
    d = decision(kind, attempt=3)
    assert (d.action, d.outcome) == ("retry", "failed")
    assert d.delay_s == random.Random(7).uniform(0, 4.0)  # full jitter below base * 2**(3-1)


def test_permanent_fails_at_once() -> None:
    assert decision("permanent") == Decision("fail", "failed", 0.0)


def test_unknown_fails_unless_the_job_allows_retrying_it() -> None:
    assert decision("unknown") == Decision("fail", "unknown", 0.0)
    allowed = decision("unknown", retry_unknown=True)
    assert (allowed.action, allowed.outcome) == ("retry", "unknown")


@pytest.mark.parametrize("kind", ["transient", "rate_limited"])
def test_a_retry_with_no_attempt_left_is_dead(kind: ErrorKind) -> None:
    assert decision(kind, exhausted=True) == Decision("dead", "failed", 0.0)
    assert decision("unknown", retry_unknown=True, exhausted=True).action == "dead"


def test_exhaustion_does_not_turn_a_plain_failure_into_dead() -> None:
    assert decision("permanent", exhausted=True).action == "fail"
    assert decision("unknown", exhausted=True).action == "fail"


def test_retry_after_is_a_floor_under_the_jitter() -> None:
    assert decision("rate_limited", retry_after_s=12.5).delay_s == 12.5
    # A floor, not a replacement: a larger jittered delay stands.
    big = Backoff(base_s=100.0, max_s=100.0)
    d = decide(
        "transient",
        retry_after_s=0.5,
        retry_unknown=False,
        exhausted=False,
        attempt=1,
        backoff=big,
        rng=random.Random(1),
    )
    assert d.delay_s == random.Random(1).uniform(0, 100.0) > 0.5


def test_backoff_doubles_up_to_its_cap() -> None:
    assert [BACKOFF.ceiling(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    assert BACKOFF.ceiling(10_000) == 30  # no overflow for absurd attempt numbers


def test_full_jitter_stays_within_the_ceiling_and_spreads() -> None:
    rng = random.Random(42)
    delays = [BACKOFF.delay(4, rng) for _ in range(1000)]
    assert all(0 <= d <= 8.0 for d in delays)
    assert min(delays) < 1.0 and max(delays) > 7.0


def test_zero_base_means_immediate_retries() -> None:
    assert Backoff(0.0, 0.0).delay(5, random.Random()) == 0.0
