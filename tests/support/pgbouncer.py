"""A real PgBouncer in transaction mode in front of a PostgreSQL, for the tests and the bench.

It runs deploy/pgbouncer/pgbouncer.ini, the configuration docs/deployment.md gives, with only
what a test must change replaced: the server it points at, its port, its files, and trust for
authentication (the suite's clusters trust loopback). It is this process's child with its own
ini in a temporary directory, never the package's system service.

PgBouncer refuses to run as root; as root it runs as the embedded PostgreSQL's system user
(jobstream/embedded_pg.py), created if need be.
"""

from __future__ import annotations

import asyncio
import configparser
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from jobstream.embedded_pg import unprivileged_user
from jobstream.ports import free_port

BINARY = Path("/usr/sbin/pgbouncer")
INI = Path(__file__).resolve().parents[2] / "deploy" / "pgbouncer" / "pgbouncer.ini"
START_TIMEOUT_S = 10.0


def missing() -> str | None:
    """Why PgBouncer cannot run here (for a skip), or None."""
    if not BINARY.exists():
        return f"{BINARY} is not installed (`make pgbouncer` installs Debian's package)"
    return None


def tested_ini(server_url: str, port: int, directory: Path) -> str:
    """deploy/pgbouncer/pgbouncer.ini, pointed at `server_url` and listening on `port`."""
    server = urlsplit(server_url)
    config = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    config.optionxform = str  # type: ignore[assignment, method-assign]  # keys as written
    config.read(INI)
    config.remove_section("databases")
    config.add_section("databases")
    config.set("databases", "*", f"host={server.hostname} port={server.port or 5432}")
    bouncer = config["pgbouncer"]
    bouncer["listen_port"] = str(port)
    bouncer["auth_type"] = "trust"
    bouncer["auth_file"] = str(directory / "userlist.txt")
    bouncer["logfile"] = str(directory / "pgbouncer.log")
    bouncer["pidfile"] = str(directory / "pgbouncer.pid")
    lines = []
    for name in config.sections():
        lines.append(f"[{name}]")
        lines += [f"{key} = {value}" for key, value in config[name].items()]
    return "\n".join(lines) + "\n"


def pooled_url(server_url: str, port: int) -> str:
    """`server_url` with PgBouncer's port in place of PostgreSQL's."""
    parts = urlsplit(server_url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))


@asynccontextmanager
async def pgbouncer(server_url: str) -> AsyncIterator[str]:
    """Run PgBouncer in front of `server_url`'s server; yield the URL of the same database
    through it. Stopped (SIGTERM, then killed) on the way out."""
    if reason := missing():
        raise RuntimeError(reason)
    port = free_port()
    directory = Path(tempfile.mkdtemp(prefix="jobstream-pgbouncer-"))
    process = start(server_url, port, directory)
    url = pooled_url(server_url, port)
    try:
        await _ready(url, process, directory)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(directory, ignore_errors=True)


def start(server_url: str, port: int, directory: Path) -> subprocess.Popen[bytes]:
    """Write the ini and the user list into `directory` and start PgBouncer on them (a few
    small files and a fork: not worth a thread)."""
    user = urlsplit(server_url).username or "postgres"
    (directory / "userlist.txt").write_text(f'"{user}" ""\n')
    ini = directory / "pgbouncer.ini"
    ini.write_text(tested_ini(server_url, port, directory))
    run_as = unprivileged_user()
    if run_as is not None:
        entry = pwd.getpwnam(run_as)
        for path in (directory, *directory.iterdir()):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    return subprocess.Popen(
        [str(BINARY), str(ini)], user=run_as, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


async def _ready(url: str, process: subprocess.Popen[bytes], directory: Path) -> None:
    """Until a query answers through PgBouncer, within START_TIMEOUT_S."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"pgbouncer exited with {process.returncode}: {_log(directory)}")
        try:
            conn = await asyncpg.connect(url, timeout=2, statement_cache_size=0)
        except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not answer: {exc}; {_log(directory)}") from exc
            await asyncio.sleep(0.05)
            continue
        try:
            await conn.fetchval("SELECT 1")
            return
        finally:
            await conn.close()


def _log(directory: Path) -> str:
    path = directory / "pgbouncer.log"
    return path.read_text()[-2000:] if path.exists() else "(no log)"
