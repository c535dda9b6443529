"""The overview's percentiles, read from the difference of two cumulative histograms as
Prometheus's histogram_quantile reads them (jobstream/series.py)."""

from __future__ import annotations

import pytest

from jobstream.series import quantile
from jobstream.types import DURATION_BUCKETS


def cumulative(per_bucket: dict[float, int]) -> list[int]:
    counts, total = [], 0
    for bound in DURATION_BUCKETS:
        total += per_bucket.get(bound, 0)
        counts.append(total)
    return counts


def test_nothing_observed_has_no_percentile() -> None:
    assert quantile(0.5, [0] * len(DURATION_BUCKETS), 0) is None


def test_a_quantile_is_linear_within_its_bucket() -> None:
    # 10 between 1 and 2.5 s: the median is half way through that bucket.
    counts = cumulative({2.5: 10})
    assert quantile(0.5, counts, 10) == pytest.approx(1.75)
    # 5 at or under 0.05 s and 5 between 5 and 10 s: p95 is 90 % through (5, 10].
    counts = cumulative({0.05: 5, 10: 5})
    assert quantile(0.95, counts, 10) == pytest.approx(9.5)
    assert quantile(0.5, counts, 10) == pytest.approx(0.05)


def test_past_the_last_bound_is_the_last_bound() -> None:
    counts = cumulative({})
    assert quantile(0.5, counts, 4) == DURATION_BUCKETS[-1]
