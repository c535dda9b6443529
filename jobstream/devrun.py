"""`make run`: PostgreSQL (embedded unless DATABASE_URL is set), one server, one worker.

A supervisor a person can trust: every child ends when it ends, however it ends (Ctrl-C, SIGTERM,
SIGHUP from a closed terminal, a closed output pipe, a child crashing; if this process is killed
outright, the kernel signals the children, and the next run stops the PostgreSQL left behind).
Each error a newcomer can meet is one plain line: a second run on the same data, a taken port
(found before the worker starts), an unreachable database. A first Ctrl-C gives running attempts
their grace period; a second hands them back at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import fcntl
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import orjson

from jobstream.embedded_pg import EmbeddedPostgres
from jobstream.settings import Settings, SettingsError

DATA_DIR = Path(".data")
PG_DIR = DATA_DIR / "pg"
LOCK_FILE = DATA_DIR / "run.lock"
HEALTHY_TIMEOUT_S = 60.0
# After the grace period, the worker's hand-back and the server's drain get this long before a
# child is killed.
STOP_MARGIN_S = 15.0
PR_SET_PDEATHSIG = 1
EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2


def _say(message: str) -> None:
    # The terminal or pipe may be gone (that is one way we end): say nothing then.
    with contextlib.suppress(OSError, ValueError):
        print(f"[make run] {message}", file=sys.stderr, flush=True)


def mask_url(url: str) -> str:
    """The URL with its password replaced by ***, fit for a message."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


class RunLock:
    """One `make run` per data directory: an flock on .data/run.lock, held while we run, which
    the kernel releases however we end. The file says who holds it and where they serve."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None

    def acquire(self) -> dict[str, object] | None:
        """None when we hold it now; else what the holder wrote."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            text = handle.read()
            handle.close()
            try:
                holder = orjson.loads(text)
            except orjson.JSONDecodeError:
                holder = None
            return holder if isinstance(holder, dict) else {}
        self._file = handle
        return None

    def describe(self, **facts: object) -> None:
        assert self._file is not None
        self._file.seek(0)
        self._file.truncate()
        self._file.write(orjson.dumps({"pid": os.getpid(), **facts}).decode())
        self._file.flush()


class Stop:
    """Signals count: the first asks for a graceful stop, the second for an immediate one."""

    def __init__(self) -> None:
        self.requests = 0
        self.event = threading.Event()
        self.why = ""

    def request(self, why: str) -> None:
        self.requests += 1
        self.why = self.why or why
        self.event.set()

    def install(self) -> None:
        def on_signal(signum: int, frame: object) -> None:
            self.request(signal.Signals(signum).name)

        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, on_signal)
        # A closed pipe is seen by _output_closed(); writes must fail, not kill us.
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)


def _output_closed() -> bool:
    """Whether the terminal or pipe we write to has gone (poll reports an error or hang-up on
    the write end of a pipe whose reader closed, and on a terminal that hung up)."""
    poller = select.poll()
    for fd in (1, 2):
        with contextlib.suppress(OSError, ValueError):
            poller.register(fd, 0)
    bad = select.POLLERR | select.POLLHUP | select.POLLNVAL
    return any(events & bad for _, events in poller.poll(0))


def _port_taken(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def _die_with_parent() -> None:
    # If we are killed outright (SIGKILL, OOM), the kernel sends the child SIGTERM.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _spawn(module: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    # A session of its own: a Ctrl-C reaches only us, and we stop the children in order.
    return subprocess.Popen(
        [sys.executable, "-m", f"jobstream.{module}"],
        env=env,
        start_new_session=True,
        preexec_fn=_die_with_parent,  # before any thread of ours runs
    )


async def _reach(url: str, timeout_s: float, stop: Stop) -> str | None:
    """None once PostgreSQL answers (or a stop is asked for); else why not, as the end of a
    sentence."""
    deadline = time.monotonic() + timeout_s
    tries, delay = 0, 0.1
    while not stop.requests:
        tries += 1
        try:
            conn = await asyncpg.connect(url, timeout=min(5.0, max(0.5, timeout_s)))
        except (TimeoutError, OSError, asyncpg.CannotConnectNowError) as exc:
            reason = str(exc) or type(exc).__name__
            if tries == 1:
                # Said once, so that a long wait is not a silent one.
                _say(f"waiting up to {timeout_s:g} s for PostgreSQL at {mask_url(url)}: {reason}")
            if time.monotonic() + delay > deadline:
                return (
                    f"{reason} (tried {tries} times in {timeout_s:g} s; is it running, and is "
                    "DATABASE_URL right? JOBSTREAM_DB_CONNECT_TIMEOUT_S sets how long to try)"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        except (asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            return f"it refused us: {exc}"
        else:
            await conn.close()
            return None
    return None


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=1) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _stop_children(children: dict[str, subprocess.Popen[bytes]], stop: Stop, grace: float) -> None:
    """SIGTERM to each; a second stop request sends SIGINT (the worker hands its jobs back at
    once, uvicorn exits at once); past the grace period and a margin, SIGKILL."""
    alive = {name: c for name, c in children.items() if c.poll() is None}
    for child in alive.values():
        child.send_signal(signal.SIGTERM)
    # Not `stop.requests > 1`: a second Ctrl-C that came before this call (while the message
    # above was printed) must still reach the children as their SIGINT.
    forced = False
    deadline = time.monotonic() + grace + STOP_MARGIN_S
    while any(c.poll() is None for c in alive.values()):
        if stop.requests > 1 and not forced:
            forced = True
            _say("stopping now: running jobs are handed back to the queue")
            for child in alive.values():
                if child.poll() is None:
                    child.send_signal(signal.SIGINT)
        if time.monotonic() > deadline:
            for name, child in alive.items():
                if child.poll() is None:
                    _say(f"the {name} did not stop in time; killing it")
                    child.kill()
            break
        stop.event.clear()
        stop.event.wait(0.05)
    for child in alive.values():
        child.wait()


def main() -> int:
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        _say(str(exc))
        return EXIT_CONFIG
    unknown = Settings.unknown_names()
    for warning in unknown.values():
        _say(f"warning: {warning}")
    # Said once here; the children need not say it again.
    env = {k: v for k, v in os.environ.items() if k not in unknown}
    started = time.monotonic()
    lock = RunLock(LOCK_FILE)
    holder = lock.acquire()
    if holder is not None:
        where, pid = holder.get("url", "?"), holder.get("pid", "?")
        _say(
            f"already running (pid {pid}, {where}, data in {DATA_DIR.resolve()}/): use that one, "
            f"or stop it first (Ctrl-C in its terminal, or kill {pid})"
        )
        return EXIT_FAILED
    if _port_taken(settings.host, settings.port):
        _say(
            f"port {settings.port} on {settings.host} is already in use by another program: "
            f"set JOBSTREAM_PORT to a free port (JOBSTREAM_PORT={settings.port + 1} make run)"
        )
        return EXIT_FAILED
    stop = Stop()
    stop.install()
    postgres: EmbeddedPostgres | None = None
    children: dict[str, subprocess.Popen[bytes]] = {}
    base_url = f"http://{settings.host}:{settings.port}"
    code = EXIT_OK
    try:
        if settings.database_url is None:
            postgres = EmbeddedPostgres(PG_DIR, port=settings.pg_port)
            url = postgres.url
            if (postgres.datadir / "postmaster.pid").exists():
                # We hold the lock, so no other `make run` owns it: one that was killed outright
                # left its PostgreSQL behind. Stop it (a stale pid file is no server: no-op).
                _say("stopping the PostgreSQL an earlier `make run` left running")
                postgres.stop()
            if _port_taken("127.0.0.1", postgres.port):
                _say(
                    f"port {postgres.port} for the embedded PostgreSQL is already in use by "
                    "another program: set JOBSTREAM_PG_PORT to a free port (or DATABASE_URL to use "
                    "your own PostgreSQL)"
                )
                return EXIT_FAILED
            _say(f"starting PostgreSQL in {PG_DIR}/ on 127.0.0.1:{postgres.port}")
            try:
                postgres.start()
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                log = postgres.datadir / "server.log"
                last = (
                    log.read_text(errors="replace").strip().splitlines()[-1:]
                    if log.exists()
                    else []
                )
                _say(f"PostgreSQL did not start: {' '.join(last) or 'no log'} (see {log})")
                return EXIT_FAILED
            env["DATABASE_URL"] = url
        else:
            url = settings.database_url
            why = asyncio.run(_reach(url, settings.db_connect_timeout_s, stop))
            if stop.requests:
                return EXIT_OK
            if why is not None:
                _say(f"cannot reach PostgreSQL at {mask_url(url)}: {why}")
                return EXIT_FAILED
        lock.describe(url=f"{base_url}/", database_url=mask_url(url))
        # The server first: the worker starts only once the port is ours and the server healthy,
        # so a server that cannot serve never leaves a worker claiming jobs.
        children["server"] = _spawn("server", env)
        deadline = time.monotonic() + HEALTHY_TIMEOUT_S
        while not _healthy(base_url):
            if stop.event.wait(0.1) or _output_closed():
                return EXIT_OK
            if children["server"].poll() is not None:
                _say(f"the server exited (code {children['server'].returncode}) before serving")
                return EXIT_FAILED
            if time.monotonic() > deadline:
                _say(f"the server did not answer {base_url}/healthz in {HEALTHY_TIMEOUT_S:g} s")
                return EXIT_FAILED
        children["worker"] = _spawn("worker", env)
        lock.describe(
            url=f"{base_url}/",
            database_url=mask_url(url),
            server_pid=children["server"].pid,
            worker_pid=children["worker"].pid,
        )
        _say(f"DATABASE_URL={mask_url(url)}")
        _say(
            f"ready in {time.monotonic() - started:.1f} s: open {base_url}/  "
            "(Ctrl-C stops everything)"
        )
        while not stop.event.wait(0.2):
            if _output_closed():
                stop.request("output closed")
                break
            crashed = [(n, c.returncode) for n, c in children.items() if c.poll() is not None]
            if crashed:
                name, returncode = crashed[0]
                _say(f"the {name} exited (code {returncode}); stopping the rest")
                code = EXIT_FAILED
                break
        return code
    finally:
        if children:
            grace = settings.shutdown_grace_s
            if stop.requests:
                _say(
                    f"stopping ({stop.why}): running jobs get up to {grace:g} s "
                    "(JOBSTREAM_SHUTDOWN_GRACE_S) to finish, then go back to the queue; "
                    "Ctrl-C again to hand them back now"
                )
            _stop_children(children, stop, grace)
        if postgres is not None:
            _say("stopping PostgreSQL")
            postgres.stop()


if __name__ == "__main__":
    sys.exit(main())
