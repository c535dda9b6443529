"""Notification lag: from an event's commit to this server process reading it (docs/design.md).

Kept per process, in memory: it describes this replica's LISTEN connection and hub, which no
table knows. Cumulative bucket counts, as Prometheus histograms expect.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

# Seconds. A healthy hub reads within milliseconds; the long tail is a lost NOTIFY caught by the
# re-check, or a backlog read after a reconnect.
LAG_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


@dataclass
class LagHistogram:
    bounds: Sequence[float] = LAG_BUCKETS
    counts: list[int] = field(default_factory=list)  # cumulative, one per bound
    total: int = 0
    sum_s: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.bounds)

    def observe_since(self, committed_at: datetime) -> None:
        # The event's timestamp is the database's clock; a skewed host clock could make it
        # negative, which would say "no lag" rather than nonsense.
        lag = max(0.0, (datetime.now(UTC) - committed_at).total_seconds())
        self.total += 1
        self.sum_s += lag
        for i, bound in enumerate(self.bounds):
            if lag <= bound:
                self.counts[i] += 1
