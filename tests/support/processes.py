"""Real processes for end-to-end tests: `python -m jobstream.worker`, `python -m jobstream.server`
(spawned by the short names "worker" and "server"), any module.

Each child runs from the repository root with the test's environment (DATABASE_URL, JOBSTREAM_*)
on top of a cleaned copy of ours, and writes stdout and stderr to one log file, so a failing test
can show what the process said. `Processes` kills whatever is still running when it closes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

REPO_ROOT = Path(__file__).resolve().parents[2]
# The processes by their short names: the packages live under jobstream when installed.
MODULES = {"server": "jobstream.server", "worker": "jobstream.worker"}

# Settings of the test run itself must not leak into a child: it gets exactly what it is given.
_INHERITED_PREFIXES = ("JOBSTREAM_",)
_INHERITED_NAMES = ("DATABASE_URL",)


class ManagedProcess:
    def __init__(
        self,
        name: str,
        module: str,
        env: Mapping[str, str],
        log_path: Path,
        command: Sequence[str] | None = None,
    ) -> None:
        self.name = name
        self.module = module
        self.log_path = log_path
        child_env = {
            k: v
            for k, v in os.environ.items()
            if k not in _INHERITED_NAMES and not k.startswith(_INHERITED_PREFIXES)
        }
        child_env.update(env)
        child_env["PYTHONUNBUFFERED"] = "1"  # log lines reach the file as they are written
        self._log: IO[bytes] = log_path.open("wb")
        # `command`: a console script as a deployment runs it (`jobstream server`), found in
        # this interpreter's bin directory; else the module by -m.
        argv = [sys.executable, "-m", MODULES.get(module, module)]
        if command is not None:
            argv = [str(Path(sys.executable).parent / command[0]), *command[1:]]
        self.popen = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def terminate(self) -> None:
        """SIGTERM: ask for a graceful shutdown."""
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, as in a crash or an OOM kill."""
        self._signal(signal.SIGKILL)

    def _signal(self, signum: signal.Signals) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signum)

    def wait(self, timeout: float) -> int:
        """Block until the process exits (raises subprocess.TimeoutExpired); its exit code."""
        code = self.popen.wait(timeout)
        self._log.close()
        return code

    async def wait_async(self, timeout_s: float) -> int:
        """Like wait(), without blocking the event loop: a bounded poll."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.popen.poll() is None:
            if loop.time() >= deadline:
                raise subprocess.TimeoutExpired(self.popen.args, timeout_s, self.output())
            await asyncio.sleep(0.02)
        return self.wait(0)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_events(self) -> list[dict[str, Any]]:
        """The JSON log lines written so far (other lines are skipped)."""
        events = []
        for line in self.output().splitlines():
            try:
                parsed = json.loads(line)
            except ValueError:
                continue
            if isinstance(parsed, dict):
                events.append(parsed)
        return events

    def errors_logged(self) -> list[str]:
        """Its error-level log lines, and any traceback printed outside the log (a crash before
        logging was set up), one line each: what went wrong, in short."""
        found = []
        for line in self.log_events():
            if line.get("level") in ("error", "critical"):
                cause = str(line.get("exception", "")).strip().splitlines()[-1:]
                found.append(f"{self.name} logged {line.get('event')!r} {cause}")
        tracebacks = [line for line in self.output().splitlines() if line.startswith("Traceback")]
        if tracebacks:
            found.append(f"{self.name} printed {len(tracebacks)} traceback(s)")
        return found

    async def wait_for_log(self, event: str, *, timeout_s: float = 10.0) -> dict[str, Any]:
        """The first log line whose `event` is `event`; fails early if the process exits."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            for line in self.log_events():
                if line.get("event") == event:
                    return line
            if self.popen.poll() is not None or loop.time() >= deadline:
                raise AssertionError(
                    f"{self.name} never logged {event!r} (exit code {self.popen.poll()}):\n"
                    + self.output()[-4000:]
                )
            await asyncio.sleep(0.02)

    def close(self) -> None:
        """Kill the process if it still runs and release its resources."""
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(10)
        self._log.close()


class Processes:
    """Spawns named processes with logs under `log_dir`; kills any still running on close."""

    def __init__(self, log_dir: Path) -> None:
        self._log_dir = log_dir
        self._spawned: list[ManagedProcess] = []

    def spawn(
        self,
        module: str,
        env: Mapping[str, str],
        *,
        name: str | None = None,
        command: Sequence[str] | None = None,
    ) -> ManagedProcess:
        name = name or f"{module}-{len(self._spawned) + 1}"
        process = ManagedProcess(name, module, env, self._log_dir / f"{name}.log", command)
        self._spawned.append(process)
        return process

    def close(self) -> None:
        for process in self._spawned:
            process.close()


@contextmanager
def processes(log_dir: Path) -> Iterator[Processes]:
    group = Processes(log_dir)
    try:
        yield group
    finally:
        group.close()
