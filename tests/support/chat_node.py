"""The Node side of the chat tests: tests/node/chat_client.mjs, run on the `ai` package that
`make chat` installed into .cache/chat-node/ (examples/chat/package-lock.json pins it)."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest

from tests.support.processes import REPO_ROOT

CHAT_NODE = REPO_ROOT / ".cache" / "chat-node"
NODE_MODULES = CHAT_NODE / "node_modules"
PAGE_DIR = CHAT_NODE / "page"
HARNESS = REPO_ROOT / "tests" / "node" / "chat_client.mjs"


def require_installed(*, page: bool = False) -> None:
    """Fail the test, saying how to mend it, when `make chat` has not run (or, with `page`,
    not built the example page)."""
    needed = [NODE_MODULES / "ai" / "package.json", *([PAGE_DIR / "app.js"] if page else [])]
    if not all(path.is_file() for path in needed):
        pytest.fail(f"{CHAT_NODE} is missing or incomplete: `make chat` installs and builds it")


async def run(base_url: str, steps: list[dict[str, Any]], *, timeout_s: float = 60) -> list[Any]:
    """Each step's answer (chat_client.mjs says what they are), in order."""
    env = {**os.environ, "CHAT_NODE_MODULES": str(NODE_MODULES)}
    plan = json.dumps({"base": base_url, "steps": steps})
    child = await asyncio.create_subprocess_exec(
        "node", str(HARNESS), plan, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(child.communicate(), timeout_s)
    except TimeoutError:
        child.kill()
        await child.wait()
        raise
    assert child.returncode == 0, err.decode()
    results: list[Any] = json.loads(out)
    thrown = [result["thrown"] for result in results if result and "thrown" in result]
    assert thrown == [], thrown
    return results


def user(message_id: str, text: str) -> dict[str, Any]:
    """A user's UI message, as useChat's sendMessage makes it."""
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def text_of(message: dict[str, Any]) -> str:
    """A UI message's text: its text parts, joined (what a chat UI shows)."""
    return "".join(part["text"] for part in message["parts"] if part["type"] == "text")
