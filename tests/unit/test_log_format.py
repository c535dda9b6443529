"""Log lines for a person at a terminal, JSON for everything else, colour only on a terminal: a
real process each time, its stderr a pseudo-terminal or a pipe."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import uuid

import pytest

from tests.support.processes import REPO_ROOT

PROGRAM = """
import sys, structlog
from jobstream import logs
choice = {"auto": None, "true": True, "false": False}[sys.argv[1]]
logs.configure("info", json=choice)
structlog.get_logger("demo").info("job_created", job_id="j1")
"""


def run(choice: str, *, terminal: bool) -> str:
    args = [sys.executable, "-c", PROGRAM, choice]
    if not terminal:
        done = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, timeout=30, check=True)
        return done.stderr.decode()
    controller, child_end = pty.openpty()
    try:
        process = subprocess.Popen(args, cwd=REPO_ROOT, stderr=child_end)
        os.close(child_end)
        chunks = []
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert process.wait(30) == 0
    finally:
        os.close(controller)
    return b"".join(chunks).decode()


def test_a_terminal_gets_console_lines_in_colour() -> None:
    out = run("auto", terminal=True)
    assert "job_created" in out and "job_id" in out
    assert not out.lstrip().startswith("{")
    assert "\x1b[" in out


@pytest.mark.parametrize("choice", ["auto", "true"])
def test_a_pipe_gets_json_lines(choice: str) -> None:
    line = json.loads(run(choice, terminal=False))
    assert (line["event"], line["job_id"]) == ("job_created", "j1")


def test_console_lines_in_a_pipe_carry_no_colour_codes() -> None:
    out = run("false", terminal=False)
    assert "job_created" in out and "job_id=j1" in out
    assert "\x1b" not in out


ATTEMPT_PROGRAM = """
import asyncio, logging, uuid, structlog
from jobstream import logs
logs.configure("info", json=True)
job, token = uuid.UUID(int=1), uuid.UUID(int=2)
async def attempt():
    structlog.get_logger("demo").info("attempt_started")
    logging.getLogger("stdlib").warning("from the standard library")
async def main():
    bound = logs.bind_attempt(job, 3, token)
    try:
        task = asyncio.create_task(attempt())
    finally:
        logs.unbind_attempt(bound)
    structlog.get_logger("demo").info("outside")
    await task
asyncio.run(main())
"""


def test_an_attempts_lines_name_it_and_the_worker_lines_do_not() -> None:
    done = subprocess.run([sys.executable, "-c", ATTEMPT_PROGRAM], cwd=REPO_ROOT,
                          capture_output=True, timeout=30, check=True)  # fmt: skip
    lines = {line["event"]: line for line in map(json.loads, done.stderr.decode().splitlines())}
    named = {"job_id": str(uuid.UUID(int=1)), "attempt": 3, "run_token": str(uuid.UUID(int=2))}
    for event in ("attempt_started", "from the standard library"):
        assert {k: lines[event].get(k) for k in named} == named
    assert "job_id" not in lines["outside"]
