"""The `jobstream` command against a real server and worker."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import orjson

from tests.e2e.conftest import Stack

JOBSTREAM_CLI = str(Path(sys.executable).with_name("jobstream"))


async def cli(stack: Stack, *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        JOBSTREAM_CLI, *args, "--url", stack.base_url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
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
    assert out == ""  # no result, so nothing a script could mistake for one


async def test_json_lines_get_and_cancel(stack: Stack) -> None:
    code, out, _ = await cli(
        stack, "submit", "x", "--simulate", simulate(5, tokens_per_second=1), "--json"
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
