"""`make run`: PostgreSQL (embedded unless DATABASE_URL is set), one server, one worker.

Ctrl-C (or SIGTERM) stops all three cleanly: the worker and server get SIGTERM and their grace
period, then the embedded PostgreSQL is stopped. If either child dies, the rest are stopped too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from jobstream.embedded_pg import EmbeddedPostgres
from jobstream.settings import Settings, SettingsError

DATA_DIR = Path(".data") / "pg"
CHILD_STOP_TIMEOUT_S = 20.0


def _say(message: str) -> None:
    print(f"[make run] {message}", file=sys.stderr, flush=True)


def _spawn(module: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    # A session of its own: Ctrl-C reaches only us, and we stop the children in order.
    return subprocess.Popen([sys.executable, "-m", module], env=env, start_new_session=True)


def _stop(children: list[subprocess.Popen[bytes]]) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + CHILD_STOP_TIMEOUT_S
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def main() -> int:
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        _say(str(exc))
        return 2
    env = dict(os.environ)
    postgres: EmbeddedPostgres | None = None
    if settings.database_url is None:
        postgres = EmbeddedPostgres(DATA_DIR, port=int(os.environ.get("JOBSTREAM_PG_PORT", "0")))
        _say(f"starting embedded PostgreSQL in {DATA_DIR}/ on 127.0.0.1:{postgres.port}")
        postgres.start()
        env["DATABASE_URL"] = postgres.url
        _say(f"DATABASE_URL={postgres.url}")
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    children: list[subprocess.Popen[bytes]] = []
    try:
        children = [_spawn("server", env), _spawn("worker", env)]
        _say(f"open http://{settings.host}:{settings.port}/  (Ctrl-C stops everything)")
        while not stop.wait(0.5):
            if any(child.poll() is not None for child in children):
                _say("a process exited; stopping the rest")
                break
    finally:
        _say("stopping server and worker")
        _stop(children)
        if postgres is not None:
            _say("stopping PostgreSQL")
            postgres.stop()
    codes = [child.returncode for child in children]
    return 0 if stop.is_set() or all(code == 0 for code in codes) else 1


if __name__ == "__main__":
    sys.exit(main())
