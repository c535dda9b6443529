"""The default create rate: a token bucket per tenant in this server process.

A tenant's own create rate (tenants.create_rate_per_min) is exact across servers, but it is
checked under the tenant's row lock, which serialises that tenant's creates; a default every
tenant pays for could not cost that. This bucket costs a dict lookup: JOBSTREAM_TENANT_CREATE_RATE
jobs a second sustained, JOBSTREAM_TENANT_CREATE_BURST at once, per server process (N replicas
admit N times the rate: docs/deployment.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from jobstream.errors import RateLimited

# How often idle tenants' buckets are looked for, seconds.
_SWEEP_EVERY_S = 300.0


@dataclass
class _Bucket:
    tokens: float
    at: float


class CreateRate:
    def __init__(
        self, per_s: float, burst: int, *, now: Callable[[], float] = time.monotonic
    ) -> None:
        self._per_s = per_s
        self._burst = float(burst)
        self._now = now
        self._buckets: dict[str, _Bucket] = {}
        self._swept_at = now()
        # A bucket idle this long is full again: forgetting it changes nothing.
        self._full_after_s = burst / per_s if per_s > 0 else 0.0

    def take(self, tenant_id: str, jobs: int = 1) -> None:
        """Count `jobs` creates of the tenant; raises RateLimited (and counts nothing) past the
        rate. A batch larger than the burst is refused whole: it could never pass."""
        if self._per_s <= 0:
            return
        now = self._now()
        self._sweep(now)
        bucket = self._buckets.get(tenant_id)
        if bucket is None:
            bucket = self._buckets[tenant_id] = _Bucket(self._burst, now)
        else:
            bucket.tokens = min(self._burst, bucket.tokens + (now - bucket.at) * self._per_s)
            bucket.at = now
        if jobs > bucket.tokens:
            if jobs > self._burst:
                raise RateLimited(
                    f"at most {int(self._burst)} jobs may be created at once", retry_after_s=1.0
                )
            wait_s = (jobs - bucket.tokens) / self._per_s
            raise RateLimited(
                f"at most {self._per_s:g} jobs a second may be created", retry_after_s=wait_s
            )
        bucket.tokens -= jobs

    def _sweep(self, now: float) -> None:
        if now - self._swept_at < _SWEEP_EVERY_S:
            return
        self._swept_at = now
        idle = [t for t, b in self._buckets.items() if now - b.at >= self._full_after_s]
        for tenant_id in idle:
            del self._buckets[tenant_id]
