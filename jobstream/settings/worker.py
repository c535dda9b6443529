"""What the worker reads: claims, leases, retries, token writes, webhooks and the janitor."""

from __future__ import annotations

from dataclasses import dataclass

from jobstream.settings.fields import not_above, setting


@dataclass(frozen=True)
class WorkerSettings:
    worker_id: str | None = setting(
        "JOBSTREAM_WORKER_ID", None, "Name of this worker process (default: host:pid)."
    )
    worker_concurrency: int = setting(
        "JOBSTREAM_WORKER_CONCURRENCY", 8, "Attempts one worker process runs at once.", minimum=1
    )
    tenant_max_share: float = setting(
        "JOBSTREAM_TENANT_MAX_SHARE",
        0.75,
        "The most of the fleet's slots (the live workers' JOBSTREAM_WORKER_CONCURRENCY summed) one "
        "tenant without a running limit of its own may take while another tenant could want one, "
        "0 to 1; such a tenant gets min(this share, an equal split among the tenants with jobs "
        "queued or running), at least 1. A deployment with one tenant has no such limit.",
    )
    claim_gather_s: float = setting(
        "JOBSTREAM_CLAIM_GATHER_S",
        0.005,
        "While at least half its slots are busy, a worker waits this long, seconds, for more "
        "slots to free before it claims, so that one claim fills several (0: claim at once).",
        minimum=0,
    )
    lease_s: float = setting(
        "JOBSTREAM_LEASE_S", 30.0, "Lease length, seconds; renewed every third of it.", minimum=0.1
    )
    poll_interval_s: float = setting(
        "JOBSTREAM_POLL_INTERVAL_S",
        1.0,
        "Seconds between claim polls when no NOTIFY arrives (the fallback).",
        minimum=0.01,
    )
    shutdown_grace_s: float = setting(
        "JOBSTREAM_SHUTDOWN_GRACE_S",
        10.0,
        "On SIGTERM, seconds running attempts get to finish before they are handed back.",
        minimum=0,
    )
    backoff_base_s: float = setting(
        "JOBSTREAM_BACKOFF_BASE_S",
        1.0,
        "First retry delay, seconds (doubles per attempt).",
        minimum=0,
    )
    backoff_max_s: float = setting(
        "JOBSTREAM_BACKOFF_MAX_S", 300.0, "Longest retry delay, seconds.", minimum=0
    )
    flush_interval_s: float = setting(
        "JOBSTREAM_FLUSH_INTERVAL_S",
        0.05,
        "Token deltas are persisted at least this often, seconds.",
        minimum=0.001,
    )
    flush_bytes: int = setting(
        "JOBSTREAM_FLUSH_BYTES", 4096, "...or as soon as this many bytes are pending.", minimum=1
    )
    token_write_interval_s: float = setting(
        "JOBSTREAM_TOKEN_WRITE_INTERVAL_S",
        0.02,
        "A worker writes the due token chunks of all its streams in one transaction, at most one "
        "such write every this many seconds: PostgreSQL's commits a second then depend on the "
        "worker processes, not on the streams (0: write as soon as the last write ends).",
        minimum=0,
    )
    webhook_secret: str = setting(
        "JOBSTREAM_WEBHOOK_SECRET",
        "",
        "Signs webhooks of tenants that have no webhook_secret of their own (`whsec_<base64>` or "
        "plain text). Empty: such a tenant is given a random secret, stored in tenants.",
        secret=True,
    )
    webhook_allow_private: bool = setting(
        "JOBSTREAM_WEBHOOK_ALLOW_PRIVATE",
        False,
        "Deliver webhooks to addresses that are not globally routable: private, loopback, "
        "link-local, shared (100.64/10) and the like. Off: the worker refuses them (SSRF), and the "
        "server refuses a webhook_url naming one literally at create (422); give both the same.",
    )
    webhook_timeout_s: float = setting(
        "JOBSTREAM_WEBHOOK_TIMEOUT_S",
        10.0,
        "Seconds one webhook try may take, DNS lookup and POST together (one deadline).",
        minimum=0.1,
    )
    webhook_max_attempts: int = setting(
        "JOBSTREAM_WEBHOOK_MAX_ATTEMPTS",
        8,
        "Tries per webhook delivery before it is marked failed.",
        minimum=1,
    )
    webhook_backoff_base_s: float = setting(
        "JOBSTREAM_WEBHOOK_BACKOFF_BASE_S",
        5.0,
        "First webhook retry delay, seconds (doubles per try, full jitter).",
        minimum=0,
    )
    webhook_backoff_max_s: float = setting(
        "JOBSTREAM_WEBHOOK_BACKOFF_MAX_S",
        3600.0,
        "Longest webhook retry delay, seconds.",
        minimum=0,
    )
    webhook_poll_interval_s: float = setting(
        "JOBSTREAM_WEBHOOK_POLL_INTERVAL_S",
        1.0,
        "Seconds between looks for due webhook deliveries.",
        minimum=0.01,
    )
    retention_s: int = setting(
        "JOBSTREAM_RETENTION_S",
        604_800,
        "How long a job is kept after it ends, seconds, unless its create asked for another "
        "retain_s (a tenant's max_retain_s caps both); then the janitor deletes the job, its "
        "attempts, events and webhook rows. Give every worker the same value.",
        minimum=1,
    )
    compact_after_s: float = setting(
        "JOBSTREAM_COMPACT_AFTER_S",
        300.0,
        "Seconds after a job ends before the janitor compacts its log (a reader that comes back "
        "sooner replays it as written) and schedules its deletion; a job is never deleted sooner.",
        minimum=0,
    )
    tombstone_s: int = setting(
        "JOBSTREAM_TOMBSTONE_S",
        86_400,
        "How long the id of a job deleted by retention answers 410 Gone, seconds (0: at once "
        "404, as an id never seen).",
        minimum=0,
    )
    janitor: bool = setting(
        "JOBSTREAM_JANITOR",
        True,
        "Run the janitor (retention, compaction) in this worker; one worker at a time does, "
        "by an advisory lock, so it may be on in every worker.",
    )
    admin_series_keep_s: int = setting(
        "JOBSTREAM_ADMIN_SERIES_KEEP_S",
        86_400,
        "Seconds the janitor keeps the dashboard's per-minute series (metric_minutes, "
        "attempt_minutes: a row a minute, and one a minute per tenant, job name and model that "
        "spent); the overview's day of spend reads them.",
        minimum=3600,
    )
    janitor_interval_s: float = setting(
        "JOBSTREAM_JANITOR_INTERVAL_S",
        5.0,
        "Seconds between the janitor's looks for work once it has none.",
        minimum=0.01,
    )
    janitor_batch: int = setting(
        "JOBSTREAM_JANITOR_BATCH",
        25,
        "Jobs the janitor compacts or deletes per transaction (a batch of 25 jobs of 20 events "
        "takes about 10 ms; at 50 a claim's p99 beside the janitor was 1.22x, at 25 1.03x).",
        minimum=1,
    )
    janitor_duty: float = setting(
        "JOBSTREAM_JANITOR_DUTY",
        0.25,
        "Share of its time the janitor works through a backlog, 0 to 1: after each batch it "
        "pauses so that the claims and appends beside it keep their latency (1: no pause).",
        minimum=0.01,
    )


def problems(settings: WorkerSettings) -> list[str]:
    found = [
        *not_above(settings, "backoff_base_s", "backoff_max_s"),
        *not_above(settings, "webhook_backoff_base_s", "webhook_backoff_max_s"),
    ]
    if settings.janitor_duty > 1:
        found.append("JOBSTREAM_JANITOR_DUTY is a share of time: at most 1")
    if not 0 < settings.tenant_max_share <= 1:
        found.append("JOBSTREAM_TENANT_MAX_SHARE is a share of the slots: above 0, at most 1")
    return found
