from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobstream.server.lag import LagHistogram


def test_buckets_are_cumulative_and_count_every_observation() -> None:
    lag = LagHistogram(bounds=(0.1, 1.0, 10.0))
    now = datetime.now(UTC)
    for seconds in (0.5, 5.0, 60.0):
        lag.observe_since(now - timedelta(seconds=seconds))
    assert lag.counts == [0, 1, 2]
    assert lag.total == 3
    assert 65.5 <= lag.sum_s < 66.5


def test_a_timestamp_from_a_clock_ahead_counts_as_no_lag() -> None:
    lag = LagHistogram(bounds=(0.1,))
    lag.observe_since(datetime.now(UTC) + timedelta(seconds=5))
    assert (lag.counts, lag.sum_s) == ([1], 0.0)
