"""The fleet's processes as a deployment runs them: one place for the command lines and the
settings that tests/e2e/fleet.py starts and deploy/compose.yaml declares (tests/unit/
test_compose.py holds the two together). Addresses differ (loopback ports here, service names
there); everything else is the same.
"""

from __future__ import annotations

SERVERS = 2
WORKERS = 3

# The console scripts of an installed jobstream (jobstream/cli.py).
SERVER_COMMAND = ("jobstream", "server")
WORKER_COMMAND = ("jobstream", "worker")
MIGRATE_COMMAND = ("jobstream", "migrate")
# nginx in the foreground (the config says `daemon off;`), on deploy/nginx/jobstream.conf, its
# logs and temp files under a prefix of its own; PgBouncer on deploy/pgbouncer/pgbouncer.ini.
NGINX_CONFIG = "deploy/nginx/jobstream.conf"
PGBOUNCER_CONFIG = "deploy/pgbouncer/pgbouncer.ini"


def nginx_command(config: str, prefix: str) -> list[str]:
    return ["nginx", "-c", config, "-p", prefix]


def pgbouncer_command(config: str) -> list[str]:
    return ["pgbouncer", config]


# Every server and worker gets these (docs/deployment.md, "The fleet").
SHARED_ENV = {
    "JOBSTREAM_LOG_JSON": "true",
    # A process started while PostgreSQL is down waits for it instead of exiting.
    "JOBSTREAM_DB_CONNECT_TIMEOUT_S": "120",
}
# The servers: only the defaults, and the per-place names below.
SERVER_ENV: dict[str, str] = {}
# The workers: a SIGTERM lets running attempts finish for this long, then hands them back.
WORKER_ENV = {"JOBSTREAM_SHUTDOWN_GRACE_S": "10"}
# Names whose values differ by place (secrets, URLs, ports): present in both, values free.
PER_PLACE = (
    # Your jobs; the fleet test's are tests/support/user_jobs.py's.
    "JOBSTREAM_APP",
    "DATABASE_URL",
    "JOBSTREAM_DIRECT_DATABASE_URL",
    "JOBSTREAM_SECRET_KEY",
    "JOBSTREAM_PORT",
    "JOBSTREAM_HOST",
    "JOBSTREAM_WORKER_ID",
    # The proxy's address: the only one whose X-Forwarded-For a server trusts.
    "FORWARDED_ALLOW_IPS",
)
