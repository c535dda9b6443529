"""/api/chat's refusals, and the chat example's files at /chat/, on a real uvicorn with no worker:
what is answered before any job streams (the streams: tests/e2e/test_chat_sdk.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from jobstream.server.app import create_app
from jobstream.settings import Settings
from tests.support.http_server import http_client, serve

PROBLEM = "application/problem+json"


def user(text: str) -> dict[str, object]:
    return {"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}


async def test_a_bad_chat_is_a_422_naming_the_ui_messages_fields(
    client: httpx.AsyncClient,
) -> None:
    sent = {
        "id": "c1",
        "messages": [
            {"id": "a0", "role": "assistant", "parts": [{"type": "step-start"}]},  # no text
            {"id": "u1", "role": "user", "parts": [
                {"type": "text", "text": "look"},
                {"type": "file", "url": "data:,x", "mediaType": "text/plain"},
            ]},
        ],
    }  # fmt: skip
    refused = await client.post("/api/chat", json=sent)
    assert refused.status_code == 422 and refused.headers["content-type"] == PROBLEM
    assert refused.json()["errors"] == [
        {"field": "messages[1].parts[1]", "message": "file parts are not supported"}
    ]
    # The job's own validation, in the chat's names: the text of UI message 1, not job message 0.
    sent["messages"][1]["parts"] = [{"type": "text", "text": "nul \x00"}]  # type: ignore[index]
    nul = await client.post("/api/chat", json={**sent, "simulate": {"tokens": -1}})
    assert nul.status_code == 422
    fields = {e["field"] for e in nul.json()["errors"]}
    assert fields == {"messages[1].parts", "simulate.tokens"}
    unknown = await client.post("/api/chat", json={"id": "c1", "messages": [user("hi")], "x": 1})
    assert [e["field"] for e in unknown.json()["errors"]] == ["x"]
    not_json = await client.post("/api/chat", content=b"{}", headers={"Content-Type": "text/plain"})
    assert not_json.status_code == 415


async def test_a_chat_with_no_job_has_nothing_to_resume_or_stop(client: httpx.AsyncClient) -> None:
    resumed = await client.get("/api/chat/never-asked/stream")
    assert resumed.status_code == 204 and resumed.content == b""
    stopped = await client.post("/api/chat/never-asked/stop")
    assert stopped.status_code == 404 and stopped.headers["content-type"] == PROBLEM


@pytest.fixture
async def page_dir(tmp_path: Path) -> Path:
    (tmp_path / "index.html").write_text("<!doctype html><title>chat</title>")
    (tmp_path / "app.js").write_text("console.log('chat')")
    return tmp_path


@pytest.fixture
async def served(settings: Settings, page_dir: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        serve(create_app(settings.replace(chat_page_dir=str(page_dir)))) as url,
        http_client(url, timeout=10) as http,
    ):
        yield http


async def test_the_chat_page_is_the_folders_files_and_nothing_else(
    served: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    page = await served.get("/chat/")
    assert page.status_code == 200 and page.text.startswith("<!doctype html>")
    # The page's own policy: its scripts and calls, nothing inline, nothing elsewhere.
    assert "default-src 'self'" in page.headers["content-security-policy"]
    script = await served.get("/chat/app.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    for path in ("/chat/missing.js", "/chat/.hidden", "/chat/%2e%2e%2fschema.sql"):
        missing = await served.get(path)
        assert missing.status_code == 404, path
        assert str(Path.cwd()) not in missing.text
    # A server that names no folder serves no page.
    unset = await client.get("/chat/")
    assert unset.status_code == 404 and "make run" in unset.json()["detail"]
