"""Schemathesis against a live jobstream: a server and a worker as real processes on a fresh
database, a tenant and its key, and the schemathesis CLI run against `/openapi.json`.

The test (tests/e2e/test_fuzz_api.py) and `make fuzz` (tests/e2e/fuzz.py) differ in how many
cases they ask for, and in the coverage phase (`make fuzz` only). The CLI, not schemathesis's
pytest plugin: its hypothesis tests are synchronous, so they could not share the suite's event
loop with anything they call, and the CLI runs every phase (examples, coverage, fuzzing,
stateful) and writes its figures to a JSON report.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from jobstream import db, tenants
from jobstream.ports import free_port
from tests.support.http_server import http_client
from tests.support.polling import eventually
from tests.support.processes import REPO_ROOT, ManagedProcess, Processes

CONFIG = REPO_ROOT / "tests" / "e2e" / "schemathesis.toml"
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
KEY_VARIABLE = "JOBSTREAM_FUZZ_API_KEY"  # read by schemathesis.toml
# The operator's keys, read by schemathesis.toml too: with them the fuzzer reaches the admin API's
# and /metrics' handlers, not only their 401.
ADMIN_KEY_VARIABLE = "JOBSTREAM_FUZZ_ADMIN_KEY"
METRICS_KEY_VARIABLE = "JOBSTREAM_FUZZ_METRICS_KEY"
ADMIN_KEY = "fuzz-operator-admin-key"
METRICS_KEY = "fuzz-operator-metrics-key"


@dataclass(frozen=True)
class Target:
    """A running server (and worker) to fuzz."""

    base_url: str
    api_key: str
    server: ManagedProcess
    worker: ManagedProcess


@dataclass(frozen=True)
class FuzzReport:
    """What one schemathesis run did, from its JSON report."""

    exit_code: int
    output: str  # the CLI's own summary, for a failing test to show
    cases: int  # test cases sent, every phase together
    failing_cases: int  # cases on which a check failed
    unique_failures: int
    errored: int  # cases that ended in an error (a network error, a timeout)
    failures: list[dict[str, Any]]
    errors: list[dict[str, Any]]
    running_time_s: float
    seed: str

    @property
    def clean(self) -> bool:
        return self.exit_code == 0 and not self.failures and not self.errors


@asynccontextmanager
async def target(group: Processes, database_url: str) -> AsyncIterator[Target]:
    """A server that requires API keys, a worker, and a tenant's key, on `database_url`."""
    conn = await db.connect(database_url)
    try:
        api_key = await tenants.create(conn, "fuzz")
    finally:
        await conn.close()
    port = free_port()
    env = {
        "DATABASE_URL": database_url,
        "JOBSTREAM_PORT": str(port),
        # A request without a key is then a 401, never the `default` tenant's: the fuzzer's key
        # reaches the handlers, and its requests without one test the refusal.
        "JOBSTREAM_REQUIRE_API_KEY": "true",
        "JOBSTREAM_ADMIN_KEY": ADMIN_KEY,
        "JOBSTREAM_METRICS_KEY": METRICS_KEY,
        "JOBSTREAM_LOG_JSON": "true",
        "JOBSTREAM_POLL_INTERVAL_S": "0.2",
        "JOBSTREAM_BACKOFF_BASE_S": "0",
        "JOBSTREAM_BACKOFF_MAX_S": "0",
        "JOBSTREAM_SHUTDOWN_GRACE_S": "0",
    }
    # The worker makes the jobs the fuzzer creates run, fail, retry and finish, so cancel, retry
    # and the event log meet every status, not only `queued`.
    worker = group.spawn("worker", {**env, "JOBSTREAM_WORKER_ID": "fuzz"}, name="worker")
    server = group.spawn("server", env, name="server")
    base_url = f"http://127.0.0.1:{port}"
    async with http_client(base_url=base_url, timeout=5) as client:

        async def healthz() -> int | None:
            if server.returncode is not None:
                raise AssertionError(f"server exited ({server.returncode}):\n{server.output()}")
            try:
                return (await client.get("/healthz")).status_code
            except httpx.TransportError:
                return None

        await eventually(healthz, lambda code: code == 200, what="the server answers", timeout_s=30)
    yield Target(base_url, api_key, server, worker)


async def run_schemathesis(
    target: Target,
    report_dir: Path,
    *,
    max_examples: int,
    seed: int | None = None,
    phases: str | None = None,
    workers: int = 1,
    timeout_s: float,
) -> FuzzReport:
    """Run the CLI against `target`; its figures. Raises TimeoutError past `timeout_s`."""
    report_path = report_dir / "schemathesis.json"
    await asyncio.to_thread(report_dir.mkdir, parents=True, exist_ok=True)
    args = [
        str(SCHEMATHESIS), "--config-file", str(CONFIG), "--no-color",
        "run", f"{target.base_url}/openapi.json",
        "--max-examples", str(max_examples),
        "--workers", str(workers),
        "--report", "json", "--report-json-path", str(report_path),
        # Hypothesis's example database would replay old failures from a run of another checkout.
        "--generation-database", "none",
        # Hypothesis times its own data generation: on a busy machine the batch body's was "too
        # slow" and failed a run in which the API did nothing wrong.
        "--suppress-health-check", "too_slow",
    ]  # fmt: skip
    if seed is not None:
        args += ["--seed", str(seed)]
    if phases is not None:
        args += ["--phases", phases]
    env = {
        **os.environ,
        KEY_VARIABLE: target.api_key,
        ADMIN_KEY_VARIABLE: ADMIN_KEY,
        METRICS_KEY_VARIABLE: METRICS_KEY,
        "COLUMNS": "120",
        # Hypothesis keeps caches in ./.hypothesis/ otherwise: the report's folder holds them.
        "HYPOTHESIS_STORAGE_DIRECTORY": str(report_dir / "hypothesis"),
    }
    process = await asyncio.create_subprocess_exec(
        *args, cwd=REPO_ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        async with asyncio.timeout(timeout_s):
            out, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return await asyncio.to_thread(_report, report_path, process.returncode, out.decode())


def _report(path: Path, exit_code: int, output: str) -> FuzzReport:
    path.with_suffix(".txt").write_text(output)
    if not path.exists():
        raise AssertionError(f"schemathesis wrote no report (exit {exit_code}):\n{output}")
    report = json.loads(path.read_text())
    cases = report["test_cases"]
    return FuzzReport(
        exit_code=exit_code,
        output=output,
        cases=cases["generated"],
        failing_cases=cases["with_failures"],
        unique_failures=cases["unique_failures"],
        errored=cases["errored"],
        failures=report["failures"],
        errors=report["errors"],
        running_time_s=report["running_time"],
        seed=str(report["seed"]),
    )
