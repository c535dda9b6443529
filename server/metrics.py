"""`GET /metrics`: Prometheus text, derived from PostgreSQL.

Counters that several processes share (jobs, attempts, cost, events) are read from the tables at
scrape time, so any server replica reports the same truth and a restart resets nothing. Only
what is truly per process (open SSE streams) comes from memory.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

import asyncpg
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response

from jobstream import queries
from jobstream.types import JOB_STATUSES
from server.hub import Hub
from server.state import state

# Seconds; LLM calls are long, so the buckets reach ten minutes.
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class _Snapshot:
    """Metric families computed before exposition (prometheus_client collectors are sync)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def _histogram(name: str, doc: str, row: asyncpg.Record) -> HistogramMetricFamily:
    bounds = [str(b) for b in DURATION_BUCKETS] + ["+Inf"]
    counts = [*row["buckets"], row["n"]]
    return HistogramMetricFamily(
        name, doc, buckets=list(zip(bounds, counts, strict=True)), sum_value=float(row["total"])
    )


def _hub_metrics(hub: Hub) -> list[Metric]:
    """This process's hub: what no table knows."""
    lag = hub.lag
    bounds = [str(b) for b in lag.bounds] + ["+Inf"]
    histogram = HistogramMetricFamily(
        "jobstream_notification_lag_seconds",
        "From an event's commit to this server's hub reading it (per process).",
        buckets=list(zip(bounds, [*lag.counts, lag.total], strict=True)),
        sum_value=lag.sum_s,
    )
    reads = CounterMetricFamily(
        "jobstream_hub_reads", "Event reads by this process's hub (one serves every reader)."
    )
    reads.add_metric([], hub.reads)
    cut_off = CounterMetricFamily(
        "jobstream_hub_readers_cut_off", "Readers cut off for falling behind (they resume)."
    )
    cut_off.add_metric([], hub.cut_off)
    return [histogram, reads, cut_off]


async def collect(pool: asyncpg.Pool, open_streams: int) -> list[Metric]:
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        by_status = {r["status"]: r["n"] for r in await conn.fetch(queries.METRICS_JOBS_BY_STATUS)}
        attempts = await conn.fetch(queries.METRICS_ATTEMPTS)
        accepted = await conn.fetchrow(queries.METRICS_ACCEPTED_COST)
        queue = await conn.fetchrow(queries.METRICS_QUEUE)
        events = await conn.fetchval(queries.METRICS_EVENTS)
        pauses = await conn.fetch(queries.METRICS_PROVIDER_PAUSES)
        bounds = list(map(float, DURATION_BUCKETS))
        queue_wait = await conn.fetchrow(queries.METRICS_QUEUE_WAIT, bounds)
        run_duration = await conn.fetchrow(queries.METRICS_RUN_DURATION, bounds)
    assert accepted is not None and queue is not None
    assert queue_wait is not None and run_duration is not None

    created = CounterMetricFamily("jobstream_jobs_created", "Jobs created.")
    created.add_metric([], sum(by_status.values()))
    jobs = GaugeMetricFamily("jobstream_jobs", "Jobs by current status.", labels=["status"])
    for status in JOB_STATUSES:
        jobs.add_metric([status], by_status.get(status, 0))
    accepted_total = CounterMetricFamily("jobstream_jobs_accepted", "Jobs with an accepted result.")
    accepted_total.add_metric([], accepted["accepted"])

    by_outcome = CounterMetricFamily(
        "jobstream_attempts", "Provider attempts by provider and outcome.",
        labels=["provider", "outcome"],
    )  # fmt: skip
    cost = CounterMetricFamily(
        "jobstream_provider_cost_usd", "Provider cost of all attempts (estimates included).",
        labels=["provider"],
    )  # fmt: skip
    unknown = CounterMetricFamily(
        "jobstream_unknown_outcomes", "Attempts whose outcome (and cost) is unknown.",
        labels=["provider"],
    )  # fmt: skip
    lost = CounterMetricFamily("jobstream_lease_expirations", "Attempts lost to an expired lease.")
    retries = CounterMetricFamily("jobstream_retries", "Attempts after the first.")
    cost_by_provider: dict[str, Decimal] = {}
    unknown_by_provider: dict[str, int] = {}
    total_attempts = total_retries = total_lost = 0
    for row in attempts:
        by_outcome.add_metric([row["provider"], row["outcome"]], row["n"])
        provider = row["provider"]
        cost_by_provider[provider] = cost_by_provider.get(provider, Decimal(0)) + row["cost"]
        unknown_by_provider[provider] = unknown_by_provider.get(provider, 0) + (
            row["n"] if row["outcome"] == "unknown" else 0
        )
        total_attempts += row["n"]
        total_retries += row["retries"]
        total_lost += row["n"] if row["outcome"] == "lost" else 0
    for provider, amount in cost_by_provider.items():
        cost.add_metric([provider], float(amount))
        unknown.add_metric([provider], unknown_by_provider[provider])
    lost.add_metric([], total_lost)
    retries.add_metric([], total_retries)
    retry_rate = GaugeMetricFamily(
        "jobstream_retry_ratio", "Share of attempts that were retries (0..1)."
    )
    retry_rate.add_metric([], total_retries / total_attempts if total_attempts else 0.0)

    per_job = GaugeMetricFamily(
        "jobstream_cost_per_accepted_job_usd",
        "Provider cost of accepted jobs (all their attempts) divided by their number.",
    )
    per_job.add_metric(
        [], float(accepted["provider_cost"]) / accepted["accepted"] if accepted["accepted"] else 0.0
    )
    charged = CounterMetricFamily("jobstream_charged_usd", "What tenants were charged.")
    charged.add_metric([], float(accepted["charged"]))

    depth = GaugeMetricFamily("jobstream_queue_depth", "Queued jobs (retries waiting included).")
    depth.add_metric([], queue["depth"])
    oldest = GaugeMetricFamily(
        "jobstream_oldest_queued_age_seconds", "How long the oldest runnable job has waited."
    )
    oldest.add_metric([], float(queue["oldest_age_s"]))
    appended = CounterMetricFamily("jobstream_events_appended", "Events appended to job logs.")
    appended.add_metric([], events)
    streams = GaugeMetricFamily("jobstream_open_streams", "Open SSE streams in this process.")
    streams.add_metric([], open_streams)
    paused = GaugeMetricFamily(
        "jobstream_provider_pause_seconds",
        "Seconds until a provider paused after a 429 is claimed for again (0: not paused).",
        labels=["provider"],
    )
    for row in pauses:
        paused.add_metric([row["provider"]], row["remaining_s"])
    return [
        created, jobs, accepted_total, by_outcome, cost, unknown, lost, retries, retry_rate,
        per_job, charged, depth, oldest, appended, streams, paused,
        _histogram("jobstream_queue_wait_seconds", "Created to first attempt.", queue_wait),
        _histogram("jobstream_run_duration_seconds", "Duration of attempts.", run_duration),
    ]  # fmt: skip


async def metrics(request: Request) -> Response:
    app = state(request)
    registry = CollectorRegistry(auto_describe=False)
    families = await collect(app.pool, app.open_streams) + _hub_metrics(app.hub)
    registry.register(_Snapshot(families))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
