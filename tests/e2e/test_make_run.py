"""`make run` (python -m jobstream.devrun) as a supervisor: every child ends however it ends, and
each error a newcomer meets is one plain line. Each run is a real process tree in a directory of
its own (its `.data/`), against the test database or an embedded PostgreSQL of its own."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import asyncpg
import orjson
import pytest

from jobstream.ports import free_port
from tests.support.http_server import http_client
from tests.support.polling import eventually
from tests.support.processes import REPO_ROOT


class Run:
    """One `python -m jobstream.devrun` in `home`, its output in a file (or a pipe)."""

    def __init__(self, home: Path, env: dict[str, str], *, pipe: bool = False) -> None:
        self.home = home
        self.port = int(env["JOBSTREAM_PORT"])
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("JOBSTREAM_") and k != "DATABASE_URL"
        }
        full_env = {**base, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1", **env}
        home.mkdir(parents=True, exist_ok=True)
        self.log_path = home / f"devrun-{len(list(home.glob('devrun-*.log')))}.log"
        self._log: IO[bytes] = self.log_path.open("wb")
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "jobstream.devrun"],
            cwd=home,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if pipe else self._log,
            stderr=subprocess.STDOUT if pipe else self._log,
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def said(self) -> list[str]:
        """Its own lines (the children's logs aside)."""
        return [line for line in self.output().splitlines() if line.startswith("[make run]")]

    async def ready(self, timeout_s: float = 45) -> dict[str, Any]:
        """Wait for the banner; the pids it wrote in .data/run.lock."""

        async def banner() -> bool:
            if self.popen.poll() is not None:
                raise AssertionError(f"devrun exited {self.popen.returncode}:\n{self.output()}")
            return any("ready in" in line for line in self.said())

        await eventually(banner, bool, what="make run is ready", timeout_s=timeout_s)
        facts: dict[str, Any] = orjson.loads((self.home / ".data" / "run.lock").read_bytes())
        return facts

    async def exited(self, timeout_s: float = 30) -> int:
        async def code() -> int | None:
            return self.popen.poll()

        await eventually(code, lambda c: c is not None, what="make run ended", timeout_s=timeout_s)
        self._log.close()
        return self.popen.wait()

    def close(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(10)
        self._log.close()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def all_gone(*pids: int) -> None:
    async def living() -> list[int]:
        return [pid for pid in pids if alive(pid)]

    await eventually(living, lambda left: not left, what="every child ended", timeout_s=10)


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[list[Run]]:
    started: list[Run] = []
    yield started
    for run in started:
        run.close()


def env_for(database_url: str, **more: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "JOBSTREAM_PORT": str(free_port()),
        "JOBSTREAM_SHUTDOWN_GRACE_S": "1",
        "JOBSTREAM_POLL_INTERVAL_S": "0.2",
        **more,
    }


# SIGINT once, then again: test_a_second_ctrl_c_hands_running_jobs_back_at_once; SIGTERM:
# test_a_misspelled_setting_is_one_line_and_an_unknown_name_a_warning.
@pytest.mark.parametrize("signum", [signal.SIGHUP])
async def test_every_child_ends_on_a_signal(
    signum: signal.Signals, runs: list[Run], tmp_path: Path, database_url: str
) -> None:
    run = Run(tmp_path, env_for(database_url))
    runs.append(run)
    facts = await run.ready()
    run.popen.send_signal(signum)
    assert await run.exited() == 0
    await all_gone(facts["server_pid"], facts["worker_pid"])
    assert any(f"stopping ({signum.name})" in line for line in run.said())


async def test_a_second_run_on_the_same_data_says_one_is_running(
    runs: list[Run], tmp_path: Path, database_url: str
) -> None:
    first = Run(tmp_path, env_for(database_url))
    runs.append(first)
    facts = await first.ready()
    second = Run(tmp_path, env_for(database_url))
    runs.append(second)
    assert await second.exited() == 1
    (line,) = second.said()
    assert f"already running (pid {first.popen.pid}, http://127.0.0.1:{first.port}/" in line
    assert str(tmp_path / ".data") in line
    assert "Traceback" not in second.output()
    assert alive(facts["server_pid"]) and alive(facts["worker_pid"])  # the first is untouched


async def test_a_closed_output_pipe_ends_everything(tmp_path: Path, database_url: str) -> None:
    # `make run | head`: the reader goes away; nothing must keep running unseen.
    run = Run(tmp_path, env_for(database_url), pipe=True)
    try:
        assert run.popen.stdout is not None
        seen = b""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 45
        while b"ready in" not in seen:
            assert loop.time() < deadline and run.popen.poll() is None, seen.decode()[-2000:]
            seen += await asyncio.to_thread(run.popen.stdout.readline)
        facts = orjson.loads((tmp_path / ".data" / "run.lock").read_bytes())
        run.popen.stdout.close()
        await run.exited()
        await all_gone(facts["server_pid"], facts["worker_pid"])
    finally:
        run.close()


async def test_a_crashed_child_stops_the_rest(
    runs: list[Run], tmp_path: Path, database_url: str
) -> None:
    run = Run(tmp_path, env_for(database_url))
    runs.append(run)
    facts = await run.ready()
    os.kill(facts["worker_pid"], signal.SIGKILL)
    assert await run.exited() == 1
    await all_gone(facts["server_pid"])
    assert "[make run] the worker exited (code -9); stopping the rest" in run.said()


async def test_a_taken_port_is_one_line_before_any_worker(
    runs: list[Run], tmp_path: Path, database_url: str
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        run = Run(tmp_path, env_for(database_url, JOBSTREAM_PORT=str(port)))
        runs.append(run)
        assert await run.exited() == 1
    assert run.said() == [
        f"[make run] port {port} on 127.0.0.1 is already in use by another program: set "
        f"JOBSTREAM_PORT to a free port (JOBSTREAM_PORT={port + 1} make run)"
    ]
    assert "worker" not in run.output()


async def test_an_unreachable_database_is_one_sentence_with_the_password_masked(
    runs: list[Run], tmp_path: Path
) -> None:
    url = f"postgresql://app:s3cret@127.0.0.1:{free_port()}/app"
    masked = url.replace("s3cret", "***")
    run = Run(tmp_path, env_for(url, JOBSTREAM_DB_CONNECT_TIMEOUT_S="1"))
    runs.append(run)
    assert await run.exited() == 1
    waiting, line = run.output().strip().splitlines()
    assert waiting.startswith(f"[make run] waiting up to 1 s for PostgreSQL at {masked}: ")
    assert line.startswith(f"[make run] cannot reach PostgreSQL at {masked}: ")
    assert "tried" in line and "JOBSTREAM_DB_CONNECT_TIMEOUT_S" in line
    assert "s3cret" not in run.output()


async def test_a_second_ctrl_c_hands_running_jobs_back_at_once(
    runs: list[Run], tmp_path: Path, database_url: str
) -> None:
    run = Run(tmp_path, env_for(database_url, JOBSTREAM_SHUTDOWN_GRACE_S="120"))
    runs.append(run)
    facts = await run.ready()
    simulate = {"tokens": 10_000, "tokens_per_second": 20, "first_token_delay_s": 0}
    async with http_client(base_url=f"http://127.0.0.1:{run.port}", timeout=5) as http:
        job = (await http.post("/api/jobs", json={"prompt": "x", "simulate": simulate})).json()

        async def status() -> str:
            return str((await http.get(job["poll_url"])).json()["status"])

        # The worker starts once the server answers: seconds, on a busy machine.
        await eventually(status, lambda s: s == "running", what="the job runs", timeout_s=30)
    run.popen.send_signal(signal.SIGINT)

    async def asked_to_wait() -> bool:
        return any("Ctrl-C again" in line for line in run.said())

    await eventually(asked_to_wait, bool, what="the first Ctrl-C is taken")
    loop = asyncio.get_running_loop()
    second_at = loop.time()
    run.popen.send_signal(signal.SIGINT)
    assert await run.exited(timeout_s=15) == 0
    assert loop.time() - second_at < 10  # far inside the 120 s grace
    await all_gone(facts["server_pid"], facts["worker_pid"])
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow(
            "SELECT j.status, a.outcome FROM jobs j JOIN job_attempts a ON a.job_id = j.id "
            "WHERE j.id = $1",
            uuid.UUID(job["id"]),
        )
    finally:
        await conn.close()
    assert row is not None and (row["status"], row["outcome"]) == ("queued", "interrupted")


async def test_embedded_postgres_keeps_its_port_and_is_stopped_even_after_a_kill(
    runs: list[Run], tmp_path: Path
) -> None:
    pg_port = free_port()
    env = {"JOBSTREAM_PG_PORT": str(pg_port), "JOBSTREAM_SHUTDOWN_GRACE_S": "1"}
    url_line = f"[make run] DATABASE_URL=postgresql://postgres@127.0.0.1:{pg_port}/postgres"
    first = Run(tmp_path, {**env, "JOBSTREAM_PORT": str(free_port())})
    runs.append(first)
    facts = await first.ready(timeout_s=90)
    assert url_line in first.said()
    # Killed outright: no clean-up of its own. The kernel ends its children (PDEATHSIG)...
    first.popen.kill()
    await first.exited()
    await all_gone(facts["server_pid"], facts["worker_pid"])
    # ...and the next run stops the PostgreSQL it left, then starts on the same port.
    second = Run(tmp_path, {**env, "JOBSTREAM_PORT": str(free_port())})
    runs.append(second)
    facts = await second.ready(timeout_s=90)
    assert "[make run] stopping the PostgreSQL an earlier `make run` left running" in second.said()
    assert url_line in second.said()
    second.popen.send_signal(signal.SIGHUP)
    assert await second.exited() == 0
    await all_gone(facts["server_pid"], facts["worker_pid"])
    assert not (tmp_path / ".data" / "pg" / "postmaster.pid").exists()


async def test_a_misspelled_setting_is_one_line_and_an_unknown_name_a_warning(
    runs: list[Run], tmp_path: Path, database_url: str
) -> None:
    env = env_for(database_url, JOBSTREAM_DEFAULT_PROVIDER="opeanai", JOBSTREAM_LOGJSON="true")
    run = Run(tmp_path, env)
    runs.append(run)
    assert await run.exited() == 2
    assert run.output().splitlines() == [
        "[make run] JOBSTREAM_DEFAULT_PROVIDER='opeanai': must be one of simulated, openai, "
        "anthropic; did you mean 'openai'?",
    ]
    del env["JOBSTREAM_DEFAULT_PROVIDER"]
    run = Run(tmp_path, env)
    runs.append(run)
    facts = await run.ready()
    run.popen.send_signal(signal.SIGTERM)
    assert await run.exited() == 0
    await all_gone(facts["server_pid"], facts["worker_pid"])
    warning = "JOBSTREAM_LOGJSON is not a setting (did you mean JOBSTREAM_LOG_JSON?); it is ignored"
    # Said once, by make run, and not again by each child.
    assert run.output().count(warning) == 1 and f"[make run] warning: {warning}" in run.said()
