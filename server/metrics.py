"""`GET /metrics`: Prometheus text, read from PostgreSQL in a few indexed reads.

Counters that several processes share (jobs, attempts, cost, events, the janitor's work) are
running totals the writing statements keep in metric_totals, in the transactions that change
what they count (schema.sql says how): any server replica reports the same truth, a restart
resets nothing, deleting history takes nothing off them, and a scrape reads a few hundred rows
whatever the history. Gauges (queued, running, the oldest queued job, the janitor's lag) come
from partial indexes: their cost follows the backlog, never the history. Only what is truly per
process (open SSE streams and those refused, the hub) comes from memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
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

from jobstream.server import metrics_access
from jobstream.server.hub import Hub
from jobstream.server.state import state
from jobstream.server.stream_slots import StreamSlots
from jobstream.sql import queries
from jobstream.types import ACTIVE_STATUSES, DURATION_BUCKETS

# Attempt outcomes as metric_totals counts them: every way an attempt ends.
ENDED_OUTCOMES = ("succeeded", "failed", "unknown", "cancelled", "lost", "interrupted")
# The statuses of jobs that are not finished, each counted through a partial index.
LIVE_STATUSES = ("queued", *sorted(ACTIVE_STATUSES))


class _Snapshot:
    """Metric families computed before exposition (prometheus_client collectors are sync)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def _histogram(
    name: str, doc: str, counts: Sequence[int], total: int, sum_s: float
) -> HistogramMetricFamily:
    """`counts`: cumulative, one per bound of DURATION_BUCKETS; `total`: the +Inf count."""
    bounds = [str(b) for b in DURATION_BUCKETS] + ["+Inf"]
    return HistogramMetricFamily(
        name, doc, buckets=list(zip(bounds, [*counts, total], strict=True)), sum_value=sum_s
    )


def _add(into: list[int], counts: Sequence[int] | None) -> None:
    for i, n in enumerate(counts or ()):
        into[i] += n


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


def _stream_metrics(streams: StreamSlots) -> Metric:
    """Streams refused for their tenant's cap: a total, not a gauge per tenant (a label per
    tenant is one series each)."""
    refused = CounterMetricFamily(
        "jobstream_streams_refused",
        "Streams refused because their tenant held JOBSTREAM_TENANT_MAX_STREAMS (per process).",
    )
    refused.add_metric([], streams.refused)
    return refused


async def collect(pool: asyncpg.Pool, open_streams: int, compact_after_s: float) -> list[Metric]:
    # One snapshot: a job that finishes meanwhile moves from the live events to the counted
    # ones in one commit, and is seen on exactly one side.
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        totals = await conn.fetch(queries.METRICS_TOTALS)
        live = {row["status"]: row for row in await conn.fetch(queries.METRICS_LIVE)}
        running = await conn.fetch(queries.METRICS_ATTEMPTS_RUNNING)
        pauses = await conn.fetch(queries.METRICS_PROVIDER_PAUSES)
        lag = await conn.fetchrow(queries.METRICS_JANITOR_LAG, compact_after_s)
    assert lag is not None
    providers = [row for row in totals if row["provider"] != ""]  # '' is the janitor's row

    def total(column: str) -> int:
        return sum(int(row[column]) for row in totals)

    created = CounterMetricFamily("jobstream_jobs_created", "Jobs created.")
    created.add_metric([], total("jobs_created"))
    jobs = GaugeMetricFamily(
        "jobstream_jobs", "Jobs not finished, by status (finished ones: the counters).",
        labels=["status"],
    )  # fmt: skip
    for status in LIVE_STATUSES:
        jobs.add_metric([status], live[status]["n"] if status in live else 0)
    accepted = total("jobs_accepted")
    accepted_total = CounterMetricFamily("jobstream_jobs_accepted", "Jobs with an accepted result.")
    accepted_total.add_metric([], accepted)

    by_outcome = CounterMetricFamily(
        "jobstream_attempts", "Provider attempts that ended, by provider and outcome.",
        labels=["provider", "outcome"],
    )  # fmt: skip
    under_way = GaugeMetricFamily(
        "jobstream_attempts_running", "Provider attempts under way.", labels=["provider"]
    )
    cost = CounterMetricFamily(
        "jobstream_provider_cost_usd", "Provider cost of all attempts (estimates included).",
        labels=["provider"],
    )  # fmt: skip
    unknown = CounterMetricFamily(
        "jobstream_unknown_outcomes", "Attempts whose outcome (and cost) is unknown.",
        labels=["provider"],
    )  # fmt: skip
    all_cost = Decimal(0)
    run_counts = [0] * len(DURATION_BUCKETS)
    wait_counts = [0] * len(DURATION_BUCKETS)
    runs = 0
    for row in providers:
        for outcome in ENDED_OUTCOMES:
            by_outcome.add_metric([row["provider"], outcome], row[outcome])
            runs += row[outcome]
        cost.add_metric([row["provider"]], float(row["cost_usd"]))
        unknown.add_metric([row["provider"]], row["unknown"])
        all_cost += row["cost_usd"]
        _add(run_counts, row["run_counts"])
        _add(wait_counts, row["queue_wait_counts"])
    for row in running:
        under_way.add_metric([row["provider"]], row["n"])
    lost = CounterMetricFamily("jobstream_lease_expirations", "Attempts lost to an expired lease.")
    lost.add_metric([], total("lost"))
    started, retried = total("attempts_started"), total("retries")
    retries = CounterMetricFamily("jobstream_retries", "Attempts after the first.")
    retries.add_metric([], retried)
    retry_rate = GaugeMetricFamily(
        "jobstream_retry_ratio", "Share of attempts that were retries (0..1)."
    )
    retry_rate.add_metric([], retried / started if started else 0.0)
    per_job = GaugeMetricFamily(
        "jobstream_cost_per_accepted_job_usd",
        "Provider cost of every attempt (failed jobs' included) per accepted job.",
    )
    per_job.add_metric([], float(all_cost) / accepted if accepted else 0.0)
    charged = CounterMetricFamily("jobstream_charged_usd", "What tenants were charged.")
    charged.add_metric([], float(sum((row["charged_usd"] for row in totals), Decimal(0))))

    queued = live.get("queued")
    depth = GaugeMetricFamily("jobstream_queue_depth", "Queued jobs (retries waiting included).")
    depth.add_metric([], queued["n"] if queued else 0)
    oldest = GaugeMetricFamily(
        "jobstream_oldest_queued_age_seconds", "How long the oldest runnable job has waited."
    )
    oldest.add_metric([], float(queued["oldest_age_s"]) if queued else 0.0)
    appended = CounterMetricFamily("jobstream_events_appended", "Events appended to job logs.")
    # Finished logs were counted when they ended; the others' last_seq is what they hold so far.
    appended.add_metric([], total("events_ended") + sum(row["events"] for row in live.values()))
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
        created, jobs, accepted_total, by_outcome, under_way, cost, unknown, lost, retries,
        retry_rate, per_job, charged, depth, oldest, appended, streams, paused,
        _histogram(
            "jobstream_queue_wait_seconds", "Created to first attempt.", wait_counts,
            started - retried, sum(float(row["queue_wait_s"]) for row in totals),
        ),
        _histogram(
            "jobstream_run_duration_seconds", "Duration of attempts that ended.", run_counts,
            runs, sum(float(row["run_s"]) for row in totals),
        ),
        *_janitor_metrics(total, lag),
    ]  # fmt: skip


def _janitor_metrics(total: Callable[[str], int], lag: asyncpg.Record) -> list[Metric]:
    """The janitor's progress (worker/janitor.py): what it removed, and how far behind it is."""
    families: list[Metric] = []
    for column, doc in (
        ("jobs_compacted", "Finished jobs whose logs the janitor compacted."),
        ("events_compacted", "Token events folded away by compaction."),
        ("jobs_deleted", "Jobs deleted past their retention."),
        ("rows_deleted", "Rows deleted with them: jobs, events, attempts, webhook deliveries."),
    ):
        family = CounterMetricFamily(f"jobstream_janitor_{column}", doc)
        family.add_metric([], total(column))
        families.append(family)
    behind = GaugeMetricFamily(
        "jobstream_janitor_lag_seconds",
        "How long the oldest overdue job has waited for the janitor: to be settled (compacted, "
        "JOBSTREAM_COMPACT_AFTER_S after its end) or deleted (past its retention).",
        labels=["stage"],
    )
    behind.add_metric(["settle"], lag["settle_s"])
    behind.add_metric(["delete"], lag["delete_s"])
    families.append(behind)
    return families


async def metrics(request: Request) -> Response:
    app = state(request)
    metrics_access.authorize(request, app.settings)
    registry = CollectorRegistry(auto_describe=False)
    families = await collect(app.pool, app.open_streams, app.settings.compact_after_s)
    registry.register(_Snapshot([*families, *_hub_metrics(app.hub), _stream_metrics(app.streams)]))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
