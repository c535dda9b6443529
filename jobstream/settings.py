"""Configuration: one typed, validated object, read from the environment at the edge.

Every field names its environment variable, default and unit. `Settings.from_env()` reports every
bad value at once with a clear message instead of a traceback.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# The names an enumerated setting may take: a misspelled one stops start-up, naming the nearest.
PROVIDER_NAMES = ("simulated", "openai")
LOG_LEVELS = ("debug", "info", "warning", "error")
# JOBSTREAM_* variables read by something other than the server and worker (the CLI, the tests),
# so that no warning calls them unknown.
OTHER_NAMES = frozenset(
    {"JOBSTREAM_URL", "JOBSTREAM_API_KEY", "JOBSTREAM_FUZZ_API_KEY", "JOBSTREAM_FUZZ_SEED",
     "JOBSTREAM_TEST_SEED"}
)  # fmt: skip


class SettingsError(ValueError):
    """A configuration value is missing or malformed."""


def _setting(
    env: str, default: Any, doc: str, *, minimum: float | None = None, secret: bool = False
) -> Any:
    # Secrets stay out of repr(), so a logged or printed Settings never shows them.
    return field(
        default=default,
        repr=not secret,
        metadata={"env": env, "doc": doc, "minimum": minimum},
    )


def _parse_bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"expected a boolean (true/false), got {raw!r}")


@dataclass(frozen=True)
class Settings:
    database_url: str | None = _setting(
        "DATABASE_URL",
        None,
        "PostgreSQL URL. Unset: `make run` and the tests start an embedded PostgreSQL.",
    )
    host: str = _setting("JOBSTREAM_HOST", "127.0.0.1", "Address the HTTP server binds to.")
    port: int = _setting("JOBSTREAM_PORT", 8000, "Port the HTTP server binds to.", minimum=0)
    db_pool_min: int = _setting(
        "JOBSTREAM_DB_POOL_MIN", 1, "Pool connections kept open.", minimum=0
    )
    db_pool_max: int = _setting("JOBSTREAM_DB_POOL_MAX", 10, "Pool connections at most.", minimum=1)
    db_connect_timeout_s: float = _setting(
        "JOBSTREAM_DB_CONNECT_TIMEOUT_S",
        60.0,
        "Seconds to keep retrying the database at start-up before giving up.",
        minimum=0,
    )
    max_body_bytes: int = _setting(
        "JOBSTREAM_MAX_BODY_BYTES",
        1_048_576,
        "Largest request body accepted, bytes (413).",
        minimum=1,
    )
    max_batch_body_bytes: int = _setting(
        "JOBSTREAM_MAX_BATCH_BODY_BYTES",
        16_777_216,
        "Largest body of POST /api/jobs/batch (up to 1,000 jobs), bytes (413).",
        minimum=1,
    )
    max_connections: int | None = _setting(
        "JOBSTREAM_MAX_CONNECTIONS",
        None,
        "Connections the server serves at once, open SSE streams included; a request on one "
        "more is answered 503. Unset: half the open-file limit (raised to the hard limit at "
        "start), at most 10,000.",
        minimum=1,
    )
    head_timeout_s: float = _setting(
        "JOBSTREAM_HEAD_TIMEOUT_S",
        10.0,
        "Seconds a connection has to send a whole request head, from when it opens or its "
        "previous response ends; then the server closes it.",
        minimum=0.1,
    )
    keep_alive_s: int = _setting(
        "JOBSTREAM_KEEP_ALIVE_S",
        5,
        "Seconds an idle connection stays open after a response (a proxy's upstream keep-alive "
        "must be shorter).",
        minimum=1,
    )
    require_idempotency_key: bool = _setting(
        "JOBSTREAM_REQUIRE_IDEMPOTENCY_KEY", False, "Reject job creation without Idempotency-Key."
    )
    require_api_key: bool = _setting(
        "JOBSTREAM_REQUIRE_API_KEY",
        False,
        "Refuse /api/jobs requests without `Authorization: Bearer <key>` (401). Off: those are "
        "the `default` tenant's; a key that is sent is always checked.",
    )
    default_provider: str = _setting(
        "JOBSTREAM_DEFAULT_PROVIDER", "simulated", "Provider used when a job names none."
    )
    simulated: bool = _setting(
        "JOBSTREAM_SIMULATED",
        True,
        "Offer the simulated provider (tests, demos). Production sets false: a job naming it, "
        "or sending a `simulate` object, is then refused (422).",
    )
    simulated_usd_per_mtok: float = _setting(
        "JOBSTREAM_SIMULATED_USD_PER_MTOK",
        2.0,
        "Price of one million simulated output tokens, USD; a job cannot choose its own. Give "
        "server and worker the same value.",
        minimum=0,
    )
    simulated_max_s: float = _setting(
        "JOBSTREAM_SIMULATED_MAX_S",
        300.0,
        "Longest a simulated attempt may be asked to last, seconds: its first-token delay plus "
        "its tokens at its rate, a fault's retry_after_s, and the timeout_s a `timeout` fault "
        "hangs for are each refused (422) above it.",
        minimum=0,
    )
    worker_id: str | None = _setting(
        "JOBSTREAM_WORKER_ID", None, "Name of this worker process (default: host:pid)."
    )
    worker_concurrency: int = _setting(
        "JOBSTREAM_WORKER_CONCURRENCY", 8, "Attempts one worker process runs at once.", minimum=1
    )
    provider_concurrency: str = _setting(
        "JOBSTREAM_PROVIDER_CONCURRENCY",
        "openai=16",
        "Most attempts running at once per provider, across every worker, as `name=N,name=N`; "
        "a provider not named has no limit. Give every worker the same value.",
    )
    claim_gather_s: float = _setting(
        "JOBSTREAM_CLAIM_GATHER_S",
        0.005,
        "While at least half its slots are busy, a worker waits this long, seconds, for more "
        "slots to free before it claims, so that one claim fills several (0: claim at once).",
        minimum=0,
    )
    lease_s: float = _setting(
        "JOBSTREAM_LEASE_S", 30.0, "Lease length, seconds; renewed every third of it.", minimum=0.1
    )
    poll_interval_s: float = _setting(
        "JOBSTREAM_POLL_INTERVAL_S",
        1.0,
        "Seconds between claim polls when no NOTIFY arrives (the fallback).",
        minimum=0.01,
    )
    shutdown_grace_s: float = _setting(
        "JOBSTREAM_SHUTDOWN_GRACE_S",
        10.0,
        "On SIGTERM, seconds running attempts get to finish before they are handed back.",
        minimum=0,
    )
    backoff_base_s: float = _setting(
        "JOBSTREAM_BACKOFF_BASE_S",
        1.0,
        "First retry delay, seconds (doubles per attempt).",
        minimum=0,
    )
    backoff_max_s: float = _setting(
        "JOBSTREAM_BACKOFF_MAX_S", 300.0, "Longest retry delay, seconds.", minimum=0
    )
    flush_interval_s: float = _setting(
        "JOBSTREAM_FLUSH_INTERVAL_S",
        0.05,
        "Token deltas are persisted at least this often, seconds.",
        minimum=0.001,
    )
    flush_bytes: int = _setting(
        "JOBSTREAM_FLUSH_BYTES", 4096, "...or as soon as this many bytes are pending.", minimum=1
    )
    token_write_interval_s: float = _setting(
        "JOBSTREAM_TOKEN_WRITE_INTERVAL_S",
        0.02,
        "A worker writes the due token chunks of all its streams in one transaction, at most one "
        "such write every this many seconds: PostgreSQL's commits a second then depend on the "
        "worker processes, not on the streams (0: write as soon as the last write ends).",
        minimum=0,
    )
    sse_heartbeat_s: float = _setting(
        "JOBSTREAM_SSE_HEARTBEAT_S", 15.0, "Seconds between SSE heartbeat comments.", minimum=0.1
    )
    sse_retry_ms: int = _setting(
        "JOBSTREAM_SSE_RETRY_MS",
        1000,
        "Reconnect delay the SSE `retry:` field asks for, ms.",
        minimum=0,
    )
    sse_send_timeout_s: float = _setting(
        "JOBSTREAM_SSE_SEND_TIMEOUT_S",
        30.0,
        "An SSE stream whose client has not taken a frame this many seconds after it was sent "
        "ends (the client stopped reading; it resumes from its last event id when it wakes).",
        minimum=0.1,
    )
    hub_recheck_s: float = _setting(
        "JOBSTREAM_HUB_RECHECK_S",
        5.0,
        "Seconds between the hub's re-reads that catch any lost NOTIFY.",
        minimum=0.05,
    )
    hub_probe_s: float = _setting(
        "JOBSTREAM_HUB_PROBE_S",
        10.0,
        "Seconds between liveness probes of the server's LISTEN connection; one that goes "
        "unanswered reconnects it.",
        minimum=0.05,
    )
    subscriber_buffer: int = _setting(
        "JOBSTREAM_SUBSCRIBER_BUFFER",
        1024,
        "Events buffered per stream subscriber before it is cut off to reconnect.",
        minimum=1,
    )
    stream_token_ttl_s: int = _setting(
        "JOBSTREAM_STREAM_TOKEN_TTL_S",
        3600,
        "Lifetime of a signed events_url token, seconds.",
        minimum=1,
    )
    secret_key: str = _setting(
        "JOBSTREAM_SECRET_KEY",
        "",
        "Key that signs events_url tokens. Empty: a random key per process (single server only).",
        secret=True,
    )
    openai_base_url: str = _setting(
        "JOBSTREAM_OPENAI_BASE_URL", "https://api.openai.com/v1", "OpenAI-compatible API base URL."
    )
    openai_api_key: str = _setting(
        "JOBSTREAM_OPENAI_API_KEY", "", "API key (never logged).", secret=True
    )
    openai_model: str = _setting("JOBSTREAM_OPENAI_MODEL", "gpt-4o-mini", "Default model.")
    openai_connect_timeout_s: float = _setting(
        "JOBSTREAM_OPENAI_CONNECT_TIMEOUT_S",
        10.0,
        "Seconds to open a connection to the provider (a failure here is safe to retry).",
        minimum=0.001,
    )
    openai_first_token_timeout_s: float = _setting(
        "JOBSTREAM_OPENAI_FIRST_TOKEN_TIMEOUT_S",
        120.0,
        "Seconds from sending the request to the first text token (covers queueing and prefill).",
        minimum=0.001,
    )
    openai_idle_timeout_s: float = _setting(
        "JOBSTREAM_OPENAI_IDLE_TIMEOUT_S",
        30.0,
        "Seconds of silence allowed between stream chunks once tokens flow.",
        minimum=0.001,
    )
    # Floats because the environment parser knows no Decimal; the provider converts them through
    # their decimal text (Decimal(str(x))), so 0.15 stays exactly 0.15.
    openai_input_usd_per_mtok: float = _setting(
        "JOBSTREAM_OPENAI_INPUT_USD_PER_MTOK",
        0.15,
        "Price of one million input (prompt) tokens, USD.",
        minimum=0,
    )
    openai_output_usd_per_mtok: float = _setting(
        "JOBSTREAM_OPENAI_OUTPUT_USD_PER_MTOK",
        0.60,
        "Price of one million output (completion) tokens, USD.",
        minimum=0,
    )
    webhook_secret: str = _setting(
        "JOBSTREAM_WEBHOOK_SECRET",
        "",
        "Signs webhooks of tenants that have no webhook_secret of their own (`whsec_<base64>` or "
        "plain text). Empty: such a tenant is given a random secret, stored in tenants.",
        secret=True,
    )
    webhook_allow_private: bool = _setting(
        "JOBSTREAM_WEBHOOK_ALLOW_PRIVATE",
        False,
        "Deliver webhooks to addresses that are not globally routable: private, loopback, "
        "link-local, shared (100.64/10) and the like. Off: the worker refuses them (SSRF), and the "
        "server refuses a webhook_url naming one literally at create (422); give both the same.",
    )
    webhook_timeout_s: float = _setting(
        "JOBSTREAM_WEBHOOK_TIMEOUT_S",
        10.0,
        "Seconds one webhook try may take, DNS lookup and POST together (one deadline).",
        minimum=0.1,
    )
    webhook_max_attempts: int = _setting(
        "JOBSTREAM_WEBHOOK_MAX_ATTEMPTS",
        8,
        "Tries per webhook delivery before it is marked failed.",
        minimum=1,
    )
    webhook_backoff_base_s: float = _setting(
        "JOBSTREAM_WEBHOOK_BACKOFF_BASE_S",
        5.0,
        "First webhook retry delay, seconds (doubles per try, full jitter).",
        minimum=0,
    )
    webhook_backoff_max_s: float = _setting(
        "JOBSTREAM_WEBHOOK_BACKOFF_MAX_S",
        3600.0,
        "Longest webhook retry delay, seconds.",
        minimum=0,
    )
    webhook_poll_interval_s: float = _setting(
        "JOBSTREAM_WEBHOOK_POLL_INTERVAL_S",
        1.0,
        "Seconds between looks for due webhook deliveries.",
        minimum=0.01,
    )
    retention_s: int = _setting(
        "JOBSTREAM_RETENTION_S",
        604_800,
        "How long a job is kept after it ends, seconds, unless its create asked for another "
        "retain_s (a tenant's max_retain_s caps both); then the janitor deletes the job, its "
        "attempts, events and webhook rows. Give every worker the same value.",
        minimum=1,
    )
    compact_after_s: float = _setting(
        "JOBSTREAM_COMPACT_AFTER_S",
        300.0,
        "Seconds after a job ends before the janitor compacts its log (a reader that comes back "
        "sooner replays it as written) and schedules its deletion; a job is never deleted sooner.",
        minimum=0,
    )
    tombstone_s: int = _setting(
        "JOBSTREAM_TOMBSTONE_S",
        86_400,
        "How long the id of a job deleted by retention answers 410 Gone, seconds (0: at once "
        "404, as an id never seen).",
        minimum=0,
    )
    janitor: bool = _setting(
        "JOBSTREAM_JANITOR",
        True,
        "Run the janitor (retention, compaction) in this worker; one worker at a time does, "
        "by an advisory lock, so it may be on in every worker.",
    )
    janitor_interval_s: float = _setting(
        "JOBSTREAM_JANITOR_INTERVAL_S",
        5.0,
        "Seconds between the janitor's looks for work once it has none.",
        minimum=0.01,
    )
    janitor_batch: int = _setting(
        "JOBSTREAM_JANITOR_BATCH",
        50,
        "Jobs the janitor compacts or deletes per transaction (a batch of 50 jobs of 20 events "
        "takes about 15 ms).",
        minimum=1,
    )
    janitor_duty: float = _setting(
        "JOBSTREAM_JANITOR_DUTY",
        0.25,
        "Share of its time the janitor works through a backlog, 0 to 1: after each batch it "
        "pauses so that the claims and appends beside it keep their latency (1: no pause).",
        minimum=0.01,
    )
    log_level: str = _setting("JOBSTREAM_LOG_LEVEL", "info", "debug, info, warning or error.")
    log_json: bool | None = _setting(
        "JOBSTREAM_LOG_JSON",
        None,
        "JSON log lines (true) or console lines (false). Unset: console lines when stderr is a "
        "terminal, JSON otherwise. Colour only on a terminal.",
    )
    pg_port: int = _setting(
        "JOBSTREAM_PG_PORT",
        54329,
        "Port of the embedded PostgreSQL that `make run` starts when DATABASE_URL is unset; the "
        "same every run, so its URL is postgresql://postgres@127.0.0.1:54329/postgres.",
        minimum=1,
    )

    def __post_init__(self) -> None:
        problems: list[str] = []
        if self.db_pool_min > self.db_pool_max:
            problems.append("JOBSTREAM_DB_POOL_MIN must not exceed JOBSTREAM_DB_POOL_MAX")
        if self.backoff_base_s > self.backoff_max_s:
            problems.append("JOBSTREAM_BACKOFF_BASE_S must not exceed JOBSTREAM_BACKOFF_MAX_S")
        if self.webhook_backoff_base_s > self.webhook_backoff_max_s:
            problems.append(
                "JOBSTREAM_WEBHOOK_BACKOFF_BASE_S must not exceed JOBSTREAM_WEBHOOK_BACKOFF_MAX_S"
            )
        if not self.simulated and self.default_provider == "simulated":
            problems.append(
                "JOBSTREAM_DEFAULT_PROVIDER is simulated, which JOBSTREAM_SIMULATED=false switches "
                "off: name another provider"
            )
        if self.janitor_duty > 1:
            problems.append("JOBSTREAM_JANITOR_DUTY is a share of time: at most 1")
        if self.log_level not in LOG_LEVELS:
            problems.append(
                f"JOBSTREAM_LOG_LEVEL={self.log_level!r}: {_one_of(self.log_level, LOG_LEVELS)}"
            )
        if self.default_provider not in PROVIDER_NAMES:
            problems.append(
                f"JOBSTREAM_DEFAULT_PROVIDER={self.default_provider!r}: "
                + _one_of(self.default_provider, PROVIDER_NAMES)
            )
        try:
            for name in parse_provider_limits(self.provider_concurrency):
                if name not in PROVIDER_NAMES:
                    problems.append(
                        f"JOBSTREAM_PROVIDER_CONCURRENCY names {name!r}: "
                        + _one_of(name, PROVIDER_NAMES)
                    )
        except ValueError as exc:
            problems.append(f"JOBSTREAM_PROVIDER_CONCURRENCY: {exc}")
        if self.database_url is not None and not self.database_url.startswith(
            ("postgres://", "postgresql://")
        ):
            problems.append("DATABASE_URL must start with postgresql://")
        if problems:
            raise SettingsError("; ".join(problems))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        problems: list[str] = []
        for f in dataclasses.fields(cls):
            name = f.metadata["env"]
            raw = env.get(name)
            if raw is None or (raw == "" and f.default is None):
                continue
            try:
                value = _parser_for(f.type)(raw)
            except ValueError as exc:
                problems.append(f"{name}={raw!r}: {exc}")
                continue
            minimum = f.metadata["minimum"]
            if minimum is not None and value < minimum:
                problems.append(f"{name}={raw!r}: must be at least {minimum}")
                continue
            values[f.name] = value
        if problems:
            raise SettingsError("invalid configuration: " + "; ".join(problems))
        values.update(overrides)
        return cls(**values)

    @property
    def provider_limits(self) -> dict[str, int]:
        """`provider_concurrency` parsed: the limit of each named provider."""
        return parse_provider_limits(self.provider_concurrency)

    @classmethod
    def unknown_names(cls, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """Each JOBSTREAM_* variable that no setting reads (a misspelling, most likely: it would
        be ignored without a word), with a warning naming the nearest known name."""
        env = os.environ if environ is None else environ
        known = sorted({f.metadata["env"] for f in dataclasses.fields(cls)} | OTHER_NAMES)
        warnings = {}
        for name in sorted(env):
            if name.startswith("JOBSTREAM_") and name not in known:
                # Compared without the prefix that they all share, which would make any two alike.
                tails = {k.removeprefix("JOBSTREAM_"): k for k in known}
                tail = name.removeprefix("JOBSTREAM_")
                nearest = difflib.get_close_matches(tail, list(tails), n=1, cutoff=0.6)
                hint = f" (did you mean {tails[nearest[0]]}?)" if nearest else ""
                warnings[name] = f"{name} is not a setting{hint}; it is ignored"
        return warnings

    @classmethod
    def for_process(cls, program: str) -> Settings | None:
        """Settings for `python -m server` / `python -m worker`: None (after one clear line on
        stderr) when they are invalid or name no database, so the caller exits with 2."""
        try:
            settings = cls.from_env()
        except SettingsError as exc:
            print(f"jobstream {program}: {exc}", file=sys.stderr)
            return None
        for warning in cls.unknown_names().values():
            print(f"jobstream {program}: warning: {warning}", file=sys.stderr)
        if settings.database_url is None:
            print(
                f"jobstream {program}: DATABASE_URL is not set "
                "(`make run` starts a local database and sets it)",
                file=sys.stderr,
            )
            return None
        return settings

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    @classmethod
    def describe(cls) -> str:
        """One line per setting, for `--help` and the README."""
        lines = []
        for f in dataclasses.fields(cls):
            lines.append(f"{f.metadata['env']:<36} default {f.default!r:<28} {f.metadata['doc']}")
        return "\n".join(lines)


def _one_of(value: str, allowed: tuple[str, ...]) -> str:
    nearest = difflib.get_close_matches(value, allowed, n=1, cutoff=0.5)
    hint = f"; did you mean {nearest[0]!r}?" if nearest else ""
    return f"must be one of {', '.join(allowed)}{hint}"


def _parser_for(annotation: Any) -> Callable[[str], Any]:
    text = str(annotation)
    if text.startswith("bool"):
        return _parse_bool
    if text.startswith("int"):
        return int
    if text.startswith("float"):
        return float
    return str


def parse_provider_limits(raw: str) -> dict[str, int]:
    """`"openai=16, vllm=4"` as `{"openai": 16, "vllm": 4}`; an empty string names none."""
    limits: dict[str, int] = {}
    for part in raw.split(","):
        if not part.strip():
            continue
        name, sep, value = (piece.strip() for piece in part.partition("="))
        if not sep or not name:
            raise ValueError(f"expected name=N, got {part.strip()!r}")
        if name in limits:
            raise ValueError(f"{name!r} is named twice")
        try:
            limit = int(value)
        except ValueError:
            raise ValueError(f"{name}: expected a whole number, got {value!r}") from None
        if limit < 1:
            raise ValueError(f"{name}: the limit must be at least 1, got {limit}")
        limits[name] = limit
    return limits
