"""What the HTTP server reads: where it listens, what it accepts, how its SSE streams behave."""

from __future__ import annotations

from dataclasses import dataclass

from jobstream.settings.fields import setting


@dataclass(frozen=True)
class ServerSettings:
    host: str = setting("JOBSTREAM_HOST", "127.0.0.1", "Address the HTTP server binds to.")
    port: int = setting("JOBSTREAM_PORT", 8000, "Port the HTTP server binds to.", minimum=0)
    allowed_hosts: str = setting(
        "JOBSTREAM_ALLOWED_HOSTS",
        "localhost,127.0.0.1,[::1]",
        "Host names the server answers to, comma-separated (a port is ignored; `*`: any); "
        "JOBSTREAM_HOST is one too unless it is a wildcard. A request for another Host is "
        "refused (400) before any route runs, against DNS rebinding; behind a proxy that "
        "passes its public name, list that name. /healthz and /readyz answer any Host.",
    )
    metrics_port: int | None = setting(
        "JOBSTREAM_METRICS_PORT",
        None,
        "Serve /metrics (and /healthz, /readyz) on this port of JOBSTREAM_METRICS_HOST, for a "
        "private scrape network; the API's port then answers 404 for /metrics. Unset: "
        "/metrics is on the API's port.",
        minimum=1,
    )
    metrics_host: str = setting(
        "JOBSTREAM_METRICS_HOST", "127.0.0.1", "Address JOBSTREAM_METRICS_PORT binds to."
    )
    metrics_key: str = setting(
        "JOBSTREAM_METRICS_KEY",
        "",
        "Operator key of /metrics: `Authorization: Bearer <key>`, required wherever it is set "
        "(401). Empty: /metrics is open while API keys are off, and refused (401) on the "
        "API's port while JOBSTREAM_REQUIRE_API_KEY is on.",
        secret=True,
    )
    admin_key: str = setting(
        "JOBSTREAM_ADMIN_KEY",
        "",
        "Operator key of /admin/api/* (the dashboard's data and actions, every tenant's): "
        "`Authorization: Bearer <key>`, required wherever it is set (401); a tenant's API key "
        "never passes. Empty: with API keys off, loopback clients only (403 for any other); "
        "with JOBSTREAM_REQUIRE_API_KEY on, /admin/api/* is refused (401) (docs/admin.md).",
        secret=True,
    )
    heartbeat_window_s: float | None = setting(
        "JOBSTREAM_HEARTBEAT_WINDOW_S",
        None,
        "A worker whose last heartbeat is older than this, seconds, shows as stale on the "
        "dashboard (it renews, and so beats, every third of JOBSTREAM_LEASE_S). Unset: two "
        "lease ticks, 2 x JOBSTREAM_LEASE_S / 3 (20 s).",
        minimum=0.1,
    )
    max_body_bytes: int = setting(
        "JOBSTREAM_MAX_BODY_BYTES",
        1_048_576,
        "Largest request body accepted, bytes (413).",
        minimum=1,
    )
    max_batch_body_bytes: int = setting(
        "JOBSTREAM_MAX_BATCH_BODY_BYTES",
        16_777_216,
        "Largest body of POST /api/jobs/batch (up to 1,000 jobs), bytes (413).",
        minimum=1,
    )
    max_connections: int | None = setting(
        "JOBSTREAM_MAX_CONNECTIONS",
        None,
        "Connections the server serves at once, open SSE streams included; a request on one "
        "more is answered 503. Unset: half the open-file limit (raised to the hard limit at "
        "start), at most 10,000.",
        minimum=1,
    )
    tenant_max_streams: int | None = setting(
        "JOBSTREAM_TENANT_MAX_STREAMS",
        None,
        "Streams one tenant may hold open in a server process at once (SSE on a job's events, "
        "/v1 streams and waiting creates, long-polls that wait), counted against the job's "
        "tenant however the stream was opened (an events_url token included); one more is "
        "answered 429. Unset: a quarter of the connection cap (JOBSTREAM_MAX_CONNECTIONS or its "
        "derived value), at least 1, so that three tenants at their cap still leave a quarter "
        "to everyone else. A deployment with one tenant sets it to the connection cap.",
        minimum=1,
    )
    head_timeout_s: float = setting(
        "JOBSTREAM_HEAD_TIMEOUT_S",
        10.0,
        "Seconds a connection has to send a whole request head, from when it opens or its "
        "previous response ends; then the server closes it.",
        minimum=0.1,
    )
    keep_alive_s: int = setting(
        "JOBSTREAM_KEEP_ALIVE_S",
        5,
        "Seconds an idle connection stays open after a response (a proxy's upstream keep-alive "
        "must be shorter).",
        minimum=1,
    )
    chat_job: str = setting(
        "JOBSTREAM_CHAT_JOB",
        "llm",
        "The job POST /api/chat creates when its body names none: the built-in `llm`, or a job "
        "of JOBSTREAM_APP's whose input takes `messages` (docs/chat.md).",
    )
    chat_page_dir: str = setting(
        "JOBSTREAM_CHAT_PAGE_DIR",
        "",
        "A folder served at /chat/ (index.html and its assets): the chat example, which "
        "`make run` builds (`make chat`) and names here. Empty: /chat/ is a 404.",
    )
    require_idempotency_key: bool = setting(
        "JOBSTREAM_REQUIRE_IDEMPOTENCY_KEY", False, "Reject job creation without Idempotency-Key."
    )
    require_api_key: bool = setting(
        "JOBSTREAM_REQUIRE_API_KEY",
        False,
        "Refuse /api/jobs requests without `Authorization: Bearer <key>` (401). Off: those are "
        "the `default` tenant's; a key that is sent is always checked.",
    )
    tenant_create_rate: float = setting(
        "JOBSTREAM_TENANT_CREATE_RATE",
        200.0,
        "Jobs a second one tenant may create, sustained, on each server process (its create "
        "rate of its own, tenants.create_rate_per_min, holds too); past it a create is answered "
        "429 rate-limited with Retry-After. 0: no default rate.",
        minimum=0,
    )
    tenant_create_burst: int = setting(
        "JOBSTREAM_TENANT_CREATE_BURST",
        2000,
        "Jobs one tenant may create at once above that rate (two full batches).",
        minimum=1,
    )
    tenant_storage_bytes: int = setting(
        "JOBSTREAM_TENANT_STORAGE_BYTES",
        1_073_741_824,
        "Bytes of job input (payload and metadata) one tenant's kept jobs may hold; a create "
        "past it is answered 403 storage-quota-exceeded, until retention or a delete frees "
        "room. 0: no bound.",
        minimum=0,
    )
    sse_heartbeat_s: float = setting(
        "JOBSTREAM_SSE_HEARTBEAT_S", 15.0, "Seconds between SSE heartbeat comments.", minimum=0.1
    )
    sse_retry_ms: int = setting(
        "JOBSTREAM_SSE_RETRY_MS",
        1000,
        "Reconnect delay the SSE `retry:` field asks for, ms.",
        minimum=0,
    )
    sse_send_timeout_s: float = setting(
        "JOBSTREAM_SSE_SEND_TIMEOUT_S",
        30.0,
        "An SSE stream whose client has not taken a frame this many seconds after it was sent "
        "ends (the client stopped reading; it resumes from its last event id when it wakes).",
        minimum=0.1,
    )
    hub_recheck_s: float = setting(
        "JOBSTREAM_HUB_RECHECK_S",
        5.0,
        "Seconds between the hub's re-reads that catch any lost NOTIFY.",
        minimum=0.05,
    )
    hub_probe_s: float = setting(
        "JOBSTREAM_HUB_PROBE_S",
        10.0,
        "Seconds between liveness probes of the server's LISTEN connection; one that goes "
        "unanswered reconnects it.",
        minimum=0.05,
    )
    subscriber_buffer: int = setting(
        "JOBSTREAM_SUBSCRIBER_BUFFER",
        1024,
        "Events buffered per stream subscriber before it is cut off to reconnect.",
        minimum=1,
    )
    stream_token_ttl_s: int = setting(
        "JOBSTREAM_STREAM_TOKEN_TTL_S",
        3600,
        "Lifetime of a signed events_url token, seconds.",
        minimum=1,
    )
    secret_key: str = setting(
        "JOBSTREAM_SECRET_KEY",
        "",
        "Key that signs events_url tokens. Empty: a random key per process (single server only).",
        secret=True,
    )
    key_grace_s: int = setting(
        "JOBSTREAM_KEY_GRACE_S",
        86_400,
        "After `jobstream tenants rotate-key`, seconds the old key (and the events_url tokens "
        "issued under it) stay valid beside the new one, to roll the new key out. 0: the old "
        "key stops at once.",
        minimum=0,
    )
