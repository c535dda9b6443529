"""PostgreSQL not up yet when the server and worker start: they wait for it, saying so in one
log line per try (no traceback storm), then serve and work once it answers."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import httpx

from jobstream.embedded_pg import EmbeddedPostgres
from jobstream.ports import free_port
from tests.support.http_server import http_client
from tests.support.polling import eventually
from tests.support.processes import Processes


async def test_server_and_worker_wait_for_a_late_database(process_group: Processes) -> None:
    with tempfile.TemporaryDirectory(prefix="jobstream-late-pg-") as tmp:
        postgres = EmbeddedPostgres(Path(tmp) / "data", durable=False)
        port = free_port()
        env = {
            "DATABASE_URL": postgres.url,
            "JOBSTREAM_PORT": str(port),
            "JOBSTREAM_DB_CONNECT_TIMEOUT_S": "60",
            "JOBSTREAM_LOG_JSON": "true",
        }
        server = process_group.spawn("server", env, name="server")
        worker = process_group.spawn("worker", env, name="worker")
        try:
            for process in (server, worker):
                line = await process.wait_for_log("database_unavailable", timeout_s=20)
                assert line["level"] == "warning" and "attempt" in line
            await asyncio.to_thread(postgres.start)
            url = f"http://127.0.0.1:{port}"
            async with http_client(base_url=url, timeout=5) as client:

                async def ready() -> int:
                    try:
                        return (await client.get("/readyz")).status_code
                    except httpx.TransportError:
                        return 0

                await eventually(ready, lambda code: code == 200, what="ready", timeout_s=30)
                simulate = {"tokens": 3, "tokens_per_second": 0, "first_token_delay_s": 0}
                body = {"prompt": "late", "simulate": simulate}
                job = (await client.post("/api/jobs", json=body)).json()

                async def status() -> str:
                    body = (await client.get(job["poll_url"])).json()
                    return str(body["status"])

                await eventually(status, lambda s: s == "succeeded", what="the job ran")
            for process in (server, worker):
                assert "Traceback" not in process.output()
                retries = [e for e in process.log_events() if e["event"] == "database_unavailable"]
                # One line per try, and tries back off: far fewer lines than a tight loop.
                assert 1 <= len(retries) <= 40
        finally:
            process_group.close()
            await asyncio.to_thread(postgres.destroy)


async def test_a_server_whose_database_never_answers_exits_with_one_line(
    process_group: Processes,
) -> None:
    """Past JOBSTREAM_DB_CONNECT_TIMEOUT_S the server gives up as the worker does: one error
    line naming the database, exit status 3, and no traceback (uvicorn logged starlette's
    formatted one as a message inside a JSON line, and the process exited 0)."""
    env = {
        "DATABASE_URL": f"postgresql://jobstream@127.0.0.1:{free_port()}/nowhere",
        "JOBSTREAM_PORT": str(free_port()),
        "JOBSTREAM_DB_CONNECT_TIMEOUT_S": "1",
        "JOBSTREAM_LOG_JSON": "true",
    }
    server = process_group.spawn("server", env, name="server")
    try:
        # 3: uvicorn's own status for a failed start-up (uvicorn.server.STARTUP_FAILURE).
        assert await server.wait_async(timeout_s=30) == 3
        assert "Traceback" not in server.output()
        lines = [e for e in server.log_events() if e["event"] == "database_unavailable"]
        # Each try said so as a warning; the last line says the server gives up.
        assert [line["level"] for line in lines][-1] == "error", server.output()
        assert {line["level"] for line in lines[:-1]} <= {"warning"}
        assert "server_ready" not in {e["event"] for e in server.log_events()}
    finally:
        process_group.close()
