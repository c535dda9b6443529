"""The `jobstream` command against a real server and worker."""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import orjson
import pytest

from jobstream.client import AsyncClient, Client, Refused, Reset, Result
from tests.e2e.conftest import Stack
from tests.support.dead_jobs import delayed, die

JOBSTREAM_CLI = str(Path(sys.executable).with_name("jobstream"))


async def cli(stack: Stack, *args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        JOBSTREAM_CLI, *args, "--url", stack.base_url,
        stdin=asyncio.subprocess.PIPE if stdin is not None else None,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(stdin), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def simulate(tokens: int, **more: Any) -> str:
    fields = {"tokens": tokens, "pattern": "count", "tokens_per_second": 200, **more}
    return orjson.dumps({"first_token_delay_s": 0, **fields}).decode()


async def test_submit_follow_prints_the_text_and_exits_0(stack: Stack) -> None:
    code, out, err = await cli(stack, "submit", "count", "--simulate", simulate(40), "--follow")
    assert code == 0, err
    assert out == "".join(f"{i} " for i in range(40)) + "\n"
    assert err.startswith("job ")


async def test_a_failed_job_says_why_and_exits_1(stack: Stack) -> None:
    fault = {"attempt": 1, "after_tokens": 3, "kind": "permanent"}
    code, out, err = await cli(
        stack, "submit", "x", "--simulate", simulate(10, faults=[fault]), "--follow"
    )
    assert code == 1
    assert "failed: permanent" in err
    assert out == "0 1 2 \n"  # streamed as it came; the exit code says it is no result
    code, out, err = await cli(
        stack, "submit", "x", "--simulate", simulate(10, faults=[fault]), "--follow",
        "--result-only",
    )  # fmt: skip
    assert (code, out) == (1, "")  # no result, so nothing a script could mistake for one


async def test_json_lines_get_and_cancel(stack: Stack) -> None:
    # 100 s of tokens, ended by the cancel: at 4 s, a busy CI machine's CLI start-ups could
    # meet a job already succeeded, and `follow` would rightly exit 0.
    code, out, _ = await cli(
        stack, "submit", "x", "--simulate", simulate(100, tokens_per_second=1), "--json"
    )
    assert code == 0
    job = orjson.loads(out)
    code, out, _ = await cli(stack, "cancel", job["id"])
    assert code == 0 and out.startswith(f"job {job['id']}: ")
    code, out, _ = await cli(stack, "follow", job["id"], "--json")
    assert code == 1  # cancelled
    lines = [orjson.loads(line) for line in out.splitlines()]
    assert lines[-1]["type"] == "done" and lines[-1]["status"] == "cancelled"
    assert [e["seq"] for e in lines] == list(range(1, len(lines) + 1))
    # Resumed after its last event: nothing to stream, the job's end still decides the code.
    code, out, _ = await cli(stack, "follow", job["id"], "--after", str(len(lines)))
    assert (code, out) == (1, "")
    code, out, _ = await cli(stack, "get", job["id"])
    assert code == 0 and "cancelled" in out
    code, _, err = await cli(stack, "get", "00000000-0000-0000-0000-000000000000")
    assert code == 2 and "404" in err


async def test_batch_creates_a_job_per_line_and_says_which_were_refused(stack: Stack) -> None:
    lines = [{"prompt": f"p{i}", "simulate": {"tokens": 1}} for i in range(3)]
    lines.insert(1, {"prompt": ""})
    stdin = b"\n".join(orjson.dumps(line) for line in lines) + b"\n"
    code, out, _ = await cli(stack, "batch", "-", stdin=stdin)
    assert code == 2  # one line was refused
    first, refused, *rest = out.splitlines()
    assert refused.startswith("refused: 422")
    for job_id in (first, *rest):
        code, shown, _ = await cli(stack, "get", job_id, "--json")
        assert code == 0 and orjson.loads(shown)["id"] == job_id


async def test_a_delayed_submit_is_queued_and_get_shows_when_it_runs(stack: Stack) -> None:
    code, out, err = await cli(stack, "submit", "later", "--delay", "3600")
    assert code == 0, err
    code, shown, _ = await cli(stack, "get", out.strip())
    assert code == 0
    assert "queued" in shown and "run at" in shown


async def test_retry_follows_the_new_job_and_the_dead_one_names_it(
    stack: Stack, pool: asyncpg.Pool
) -> None:
    # Regression (issue 9, defect 4): a retry appended to the dead job's log, after its `done`.
    job = await stack.create_job(delayed(10))
    await die(pool, uuid.UUID(job["id"]), ["0 1 "])
    code, out, err = await cli(stack, "retry", job["id"], "--follow")
    assert code == 0, err
    assert out == "".join(f"{i} " for i in range(10)) + "\n"
    retry_id = err.split()[1]
    assert err.startswith(f"job {retry_id} (retry of {job['id']})\n")
    # The dead job's log still ends with its one `done`; the CLI says where the retry went.
    code, out, err = await cli(stack, "follow", job["id"], "--json")
    events = [orjson.loads(line) for line in out.splitlines()]
    assert code == 1
    assert [e["type"] for e in events].count("done") == 1
    assert (events[-1]["type"], events[-1]["status"]) == ("done", "dead")
    assert f"was retried as {retry_id}: jobstream follow {retry_id}" in err
    # Asked again, the retry is the same job; `get` shows the link.
    code, out, _ = await cli(stack, "retry", job["id"])
    assert (code, out) == (0, f"{retry_id}\n")
    code, out, _ = await cli(stack, "get", job["id"])
    assert code == 0 and f"retried as {retry_id}" in out


async def test_piped_output_streams_and_ctrl_c_says_how_to_resume(stack: Stack) -> None:
    # The job (5 s of tokens) starts once the CLI follows it: a CLI slow to start under load
    # read the whole text of a 2 s job and exited 0 before the SIGINT.
    async with stack.provider_held("simulated"):
        job = await stack.create_job(
            {"prompt": "p", "simulate": orjson.loads(simulate(100, tokens_per_second=20))}
        )
        process = await asyncio.create_subprocess_exec(
            JOBSTREAM_CLI, "follow", job["id"], "--url", stack.base_url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        await stack.streams_open(1)
    assert process.stdout is not None and process.stderr is not None
    # Piped, the text still comes as it is written: the first tokens long before the job ends.
    first = await asyncio.wait_for(process.stdout.readuntil(b"2 "), 10)
    assert first == b"0 1 2 "
    process.send_signal(signal.SIGINT)
    rest, err = await asyncio.wait_for(process.communicate(), 10)
    assert process.returncode == 130
    hint = err.decode().strip().splitlines()[-1]
    command = hint.partition("Resume with: ")[2].split()
    assert command[:3] == ["jobstream", "follow", job["id"]] and command[3] == "--after", hint
    # The command it gives goes on exactly where this one stopped.
    code, more, _ = await cli(stack, *command[1:])
    assert code == 0
    assert (first + rest).decode() + more == "".join(f"{i} " for i in range(100)) + "\n"


async def test_list_shows_the_newest_jobs_and_the_next_page(stack: Stack) -> None:
    ids = [(await stack.create_job({"prompt": "later", "delay_s": 3600}))["id"] for _ in range(3)]
    code, out, err = await cli(stack, "list", "--status", "queued", "--limit", "2")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == ids[:0:-1]
    assert all(" queued " in line for line in out.splitlines())
    cursor = err.strip().removeprefix("more: jobstream list --cursor ")
    code, out, err = await cli(stack, "list", "--status", "queued", "--cursor", cursor, "--json")
    assert code == 0 and [orjson.loads(line)["id"] for line in out.splitlines()] == ids[:1]
    assert err == ""


async def test_simulate_says_it_takes_json() -> None:
    process = await asyncio.create_subprocess_exec(
        JOBSTREAM_CLI, "submit", "--help", stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(process.communicate(), 30)
    assert "--simulate JSON" in out.decode() and '"tokens": 200' in out.decode()


async def test_the_library_follows_a_retried_job_to_its_result(stack: Stack) -> None:
    fault = {"attempt": 1, "after_tokens": 3, "kind": "transient"}
    sim = orjson.loads(simulate(6, faults=[fault]))

    def use_the_sync_client() -> tuple[dict[str, Any], list[Any], dict[str, Any]]:
        with Client(stack.base_url) as client:
            job = client.submit("p", simulate=sim)
            items = list(client.follow(job["id"]))
            return job, items, client.list(limit=1)

    job, items, page = await asyncio.to_thread(use_the_sync_client)
    text = ""
    for item in items[:-1]:
        text = item.text if isinstance(item, Reset) else text + item.text
    assert text == "0 1 2 3 4 5 "
    assert any(isinstance(item, Reset) and item.attempt == 2 for item in items)
    result = items[-1]
    assert isinstance(result, Result) and result.succeeded and result.text == text
    assert page["jobs"][0]["id"] == job["id"]
    async with AsyncClient(stack.base_url) as client:
        assert (await client.cancel(job["id"]))["status"] == "succeeded"
        with pytest.raises(Refused) as refused:
            await client.get("00000000-0000-0000-0000-000000000000")
        assert refused.value.status == 404
