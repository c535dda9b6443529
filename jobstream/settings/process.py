"""What both processes read: the database, logging and the embedded PostgreSQL."""

from __future__ import annotations

from dataclasses import dataclass

from jobstream.settings.fields import not_above, one_of, setting

LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class ProcessSettings:
    database_url: str | None = setting(
        "DATABASE_URL",
        None,
        "PostgreSQL URL. Unset: `make run` and the tests start an embedded PostgreSQL.",
    )
    direct_database_url: str | None = setting(
        "JOBSTREAM_DIRECT_DATABASE_URL",
        None,
        "PostgreSQL URL that bypasses a connection pooler, for what needs a session of its own: "
        "LISTEN, the janitor's advisory lock, schema changes. Set it when DATABASE_URL is "
        "PgBouncer in transaction mode (the pool then keeps no prepared statements). Unset: "
        "DATABASE_URL serves everything.",
        secret=True,  # a URL may carry a password
    )
    db_pool_min: int = setting("JOBSTREAM_DB_POOL_MIN", 1, "Pool connections kept open.", minimum=0)
    db_pool_max: int = setting("JOBSTREAM_DB_POOL_MAX", 10, "Pool connections at most.", minimum=1)
    db_connect_timeout_s: float = setting(
        "JOBSTREAM_DB_CONNECT_TIMEOUT_S",
        60.0,
        "Seconds to keep retrying the database at start-up before giving up.",
        minimum=0,
    )
    log_level: str = setting("JOBSTREAM_LOG_LEVEL", "info", "debug, info, warning or error.")
    log_json: bool | None = setting(
        "JOBSTREAM_LOG_JSON",
        None,
        "JSON log lines (true) or console lines (false). Unset: console lines when stderr is a "
        "terminal, JSON otherwise. Colour only on a terminal.",
    )
    app: str | None = setting(
        "JOBSTREAM_APP",
        None,
        "Your jobs, as `package.module:app` (a jobstream.App), importable from the working "
        "directory. The server validates inputs and publishes schemas with it, the worker runs "
        "its handlers. Unset: only the built-in `llm` job exists.",
    )
    pg_port: int = setting(
        "JOBSTREAM_PG_PORT",
        54329,
        "Port of the embedded PostgreSQL that `make run` starts when DATABASE_URL is unset; the "
        "same every run, so its URL is postgresql://postgres@127.0.0.1:54329/postgres.",
        minimum=1,
    )

    @property
    def session_database_url(self) -> str | None:
        """Where connections that need a session of their own go: the direct URL, or the one."""
        return self.direct_database_url or self.database_url

    @property
    def pooled(self) -> bool:
        """DATABASE_URL is a transaction pooler (a direct URL is set beside it)."""
        return self.direct_database_url is not None


def problems(settings: ProcessSettings) -> list[str]:
    found = not_above(settings, "db_pool_min", "db_pool_max")
    if settings.log_level not in LOG_LEVELS:
        found.append(
            f"JOBSTREAM_LOG_LEVEL={settings.log_level!r}: {one_of(settings.log_level, LOG_LEVELS)}"
        )
    if settings.database_url is not None and not settings.database_url.startswith(
        ("postgres://", "postgresql://")
    ):
        found.append("DATABASE_URL must start with postgresql://")
    if settings.direct_database_url is not None:
        if not settings.direct_database_url.startswith(("postgres://", "postgresql://")):
            found.append("JOBSTREAM_DIRECT_DATABASE_URL must start with postgresql://")
        if settings.database_url is None:
            found.append("JOBSTREAM_DIRECT_DATABASE_URL needs DATABASE_URL (the pooler's URL)")
    return found
