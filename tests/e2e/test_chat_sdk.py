"""The Vercel AI SDK's own client, unchanged (`ai`, pinned by examples/chat/package-lock.json),
against /api/chat on a live server and worker (real processes, one pair for the module):
DefaultChatTransport's sendMessages and reconnectToStream, readUIMessageStream, and the SDK's
parser and schema on every part the server sends (docs/chat.md)."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from jobstream import db, tenants
from tests.e2e.conftest import OUTPUT_DIR, Stack
from tests.support import chat_node, database
from tests.support.chat_node import text_of, user
from tests.support.polling import eventually
from tests.support.processes import processes

# Three seconds of text: long enough to hang up on, and to reconnect to while it is written,
# on a machine busy with other things (a reconnect after the end is a 204).
PACED = {"tokens": 80, "tokens_per_second": 25, "first_token_delay_s": 0}
FAST = {"tokens": 12, "tokens_per_second": 0, "first_token_delay_s": 0}
# The first attempt fails after a third of its text; the second writes it all anew. Its pace
# matters less: a reconnect after the end of a job that retried is answered all the same.
RETRIED = {
    "tokens": 60, "tokens_per_second": 60, "first_token_delay_s": 0,
    "faults": [{"attempt": 1, "after_tokens": 20, "kind": "transient"}],
}  # fmt: skip


@pytest.fixture(scope="module")
async def chat_stack(admin_url: str, template_ready: None) -> AsyncIterator[Stack]:
    chat_node.require_installed()
    url = await database.create_test_database(admin_url)
    logs = OUTPUT_DIR / "e2e" / "test_chat_sdk"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    try:
        with processes(logs) as group:
            stack = Stack(group, url)
            stack.env["JOBSTREAM_APP"] = "tests.support.chat_jobs:app"
            try:
                await stack.start()
                yield stack
            finally:
                await stack.aclose()
    finally:
        await database.drop_test_database(admin_url, url)


async def job(stack: Stack, job_id: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    found = await stack.http.get(f"/api/jobs/{job_id}", headers=headers)
    assert found.status_code == 200, found.text
    body: dict[str, Any] = found.json()
    return body


async def chat_jobs(stack: Stack, chat_id: str) -> list[dict[str, Any]]:
    """The default tenant's jobs made for `chat_id` (each says its chat in its metadata)."""
    listed = (await stack.http.get("/api/jobs", params={"limit": 100})).json()["jobs"]
    return [j for j in listed if j["metadata"].get("chat_id") == chat_id]


def kinds(chunks: list[dict[str, Any]]) -> list[str]:
    return [chunk["type"] for chunk in chunks]


async def test_send_hang_up_reconnect_and_retried_post(chat_stack: Stack) -> None:
    chat = f"chat-{uuid.uuid4().hex[:8]}"
    sent = {"do": "send", "chatId": chat, "messages": [user("u1", "Explain leases")],
            "body": {"simulate": PACED}}  # fmt: skip
    hung_up, resumed, again, after_end = await chat_node.run(
        chat_stack.base_url,
        [{**sent, "hangUpAfterDeltas": 2}, {"do": "reconnect", "chatId": chat}, sent,
         {"do": "reconnect", "chatId": chat}],
    )  # fmt: skip
    job_id = hung_up["message"]["id"]
    done = await job(chat_stack, job_id)
    assert done["status"] == "succeeded" and done["attempts"] == 1
    expected = done["result"]["text"]
    # Hung up mid-stream: a part of the text, nothing else.
    assert hung_up["errors"] and 0 < len(text_of(hung_up["message"])) < len(expected)
    assert expected.startswith(text_of(hung_up["message"]))
    # The reconnect replays the message from its start, then live to its end.
    assert resumed["errors"] == []
    assert resumed["message"]["id"] == job_id
    assert text_of(resumed["message"]) == expected
    assert kinds(resumed["chunks"])[:3] == ["start", "start-step", "text-start"]
    assert kinds(resumed["chunks"])[-3:] == ["text-end", "finish-step", "finish"]
    metadata = resumed["message"]["metadata"]
    assert metadata["jobId"] == job_id and metadata["status"] == "succeeded"
    usage = done["result"]["usage"]
    assert metadata["usage"] == {
        "inputTokens": usage["input_tokens"], "outputTokens": usage["output_tokens"],
        "totalTokens": usage["input_tokens"] + usage["output_tokens"],
    }  # fmt: skip
    assert metadata["costUsd"] == usage["cost"] and metadata["costKnown"] is True
    # The same POST again: the same job (ended now, so its message at once), no second one.
    assert again["errors"] == [] and again["message"]["id"] == job_id
    assert text_of(again["message"]) == expected
    assert [j["id"] for j in await chat_jobs(chat_stack, chat)] == [job_id]
    # Nothing in flight: 204, which the transport reads as nothing to resume.
    assert after_end is None


async def test_send_streams_to_the_result_and_a_new_message_is_a_new_job(
    chat_stack: Stack,
) -> None:
    chat = f"chat-{uuid.uuid4().hex[:8]}"
    first = [user("u1", "Explain leases")]
    (answered,) = await chat_node.run(
        chat_stack.base_url,
        [{"do": "send", "chatId": chat, "messages": first, "body": {"simulate": FAST}}],
    )
    assert answered["errors"] == []
    done = await job(chat_stack, answered["message"]["id"])
    assert text_of(answered["message"]) == done["result"]["text"]
    # The next turn carries the answer as the SDK keeps it (its parts, step and all).
    history = [*first, answered["message"], user("u2", "And fencing?")]
    (second,) = await chat_node.run(
        chat_stack.base_url,
        [{"do": "send", "chatId": chat, "messages": history, "body": {"simulate": FAST}}],
    )
    assert second["errors"] == [] and second["message"]["id"] != answered["message"]["id"]
    second_job = await job(chat_stack, second["message"]["id"])
    assert text_of(second["message"]) == second_job["result"]["text"]
    assert len(await chat_jobs(chat_stack, chat)) == 2


async def test_a_retry_after_partial_text_ends_with_the_accepted_text(chat_stack: Stack) -> None:
    chat = f"chat-{uuid.uuid4().hex[:8]}"
    cut, resumed, replayed = await chat_node.run(
        chat_stack.base_url,
        [{"do": "send", "chatId": chat, "messages": [user("u1", "Explain retries")],
          "body": {"simulate": RETRIED}},
         {"do": "reconnect", "chatId": chat}, {"do": "reconnect", "chatId": chat}],
    )  # fmt: skip
    job_id = cut["message"]["id"]
    done = await job(chat_stack, job_id)
    assert done["status"] == "succeeded" and done["attempts"] == 2
    expected = done["result"]["text"]
    # The first attempt's text was told, then the stream said why it ends and ended: the
    # client's message holds text that is not the answer, and it is told to reconnect.
    told = text_of(cut["message"])
    assert 0 < len(told) < len(expected)
    assert kinds(cut["chunks"])[-3:] == ["text-end", "data-resume", "error"]
    assert cut["chunks"][-2]["transient"] is True
    assert [e["message"] for e in cut["errors"]] == [cut["chunks"][-1]["errorText"]]
    # The reconnect tells the accepted attempt's text alone: the SDK's reader ends with it.
    assert resumed["errors"] == []
    assert resumed["message"]["id"] == job_id
    assert text_of(resumed["message"]) == expected
    # Once ended, a job that retried is still answered (a client cut at its retry is owed the
    # answer), whole, from its row.
    assert replayed is not None and replayed["errors"] == []
    assert text_of(replayed["message"]) == expected


async def test_every_part_passes_the_sdks_schema(chat_stack: Stack) -> None:
    """The SDK's own parser and schema on the bytes of each kind of ending: a success with
    progress, a text returned rather than streamed, a retry's cut, a failure, a cancel."""
    base = chat_stack.base_url

    def post(chat: str, body: dict[str, Any]) -> dict[str, Any]:
        messages = [user("u1", "Explain leases")]
        sent = {"id": chat, "messages": messages, "trigger": "submit-message", **body}
        return {"do": "raw", "method": "POST", "path": "/api/chat", "body": sent}

    permanent = {**FAST, "faults": [{"attempt": 1, "after_tokens": 3, "kind": "permanent"}]}
    asked = {
        "progress": post("schema-progress", {"job": "chat_reply"}),
        "returned": post("schema-returned", {"job": "chat_echo"}),
        "cut": post("schema-cut", {"simulate": RETRIED}),
        "failed": post("schema-failed", {"simulate": permanent}),
    }
    answers = dict(zip(asked, await chat_node.run(base, list(asked.values())), strict=True))
    for name, answer in answers.items():
        assert answer["status"] == 200, (name, answer)
        assert answer["headers"]["content-type"].startswith("text/event-stream")
        assert answer["headers"]["x-vercel-ai-ui-message-stream"] == "v1"
        assert answer["frames"][-1] == "[DONE]", name
        assert [p for p in answer["parsed"] if not p["success"]] == [], name
        assert len(answer["parsed"]) == len(answer["frames"]) - 1
    parts = {name: [p["value"] for p in answer["parsed"]] for name, answer in answers.items()}
    progress = [p for p in parts["progress"] if p["type"] == "data-progress"]
    assert [p["data"] for p in progress] == [
        {"fraction": 0.0, "message": "reading"}, {"fraction": 1.0, "message": "answered"},
    ]  # fmt: skip
    assert {p["id"] for p in progress} == {"progress"}  # one part, updated in place
    returned = "".join(p["delta"] for p in parts["returned"] if p["type"] == "text-delta")
    assert returned == "you said: Explain leases"
    assert kinds(parts["cut"])[-2:] == ["data-resume", "error"]
    failed = parts["failed"]
    assert kinds(failed)[-3:] == ["error", "finish-step", "finish"]
    assert failed[-1]["finishReason"] == "error"
    assert failed[-1]["messageMetadata"]["status"] == "failed"


async def test_stop_cancels_the_chats_job(chat_stack: Stack) -> None:
    chat = f"chat-{uuid.uuid4().hex[:8]}"
    (hung_up,) = await chat_node.run(
        chat_stack.base_url,
        [{"do": "send", "chatId": chat, "messages": [user("u1", "Explain leases")],
          "body": {"simulate": {**PACED, "tokens": 400}}, "hangUpAfterDeltas": 1}],
    )  # fmt: skip
    job_id = hung_up["message"]["id"]
    assert (await job(chat_stack, job_id))["status"] == "running"  # hanging up cancels nothing
    stopped = await chat_stack.http.post(f"/api/chat/{chat}/stop")
    assert stopped.status_code == 202, stopped.text
    assert stopped.json() == {"chat_id": chat, "job_id": job_id, "status": "cancelling"}
    await eventually(
        lambda: job(chat_stack, job_id), lambda j: j["status"] == "cancelled",
        what="the chat's job cancelled", timeout_s=20,
    )  # fmt: skip
    (after,) = await chat_node.run(chat_stack.base_url, [{"do": "reconnect", "chatId": chat}])
    assert after is None
    again = await chat_stack.http.post(f"/api/chat/{chat}/stop")
    assert again.status_code == 200 and again.json()["status"] == "cancelled"
    missing = await chat_stack.http.post("/api/chat/no-such-chat/stop")
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/problem+json"


async def test_a_tenants_chat_is_its_own(chat_stack: Stack) -> None:
    conn = await db.connect(chat_stack.env["DATABASE_URL"])
    try:
        key = await tenants.create(conn, f"chat-{uuid.uuid4().hex[:8]}")
    finally:
        await conn.close()
    mine = {"Authorization": f"Bearer {key}"}
    chat = f"chat-{uuid.uuid4().hex[:8]}"
    sent = {"do": "send", "chatId": chat, "messages": [user("u1", "Explain leases")],
            "body": {"simulate": PACED}, "headers": mine}  # fmt: skip
    hung_up, theirs, resumed = await chat_node.run(
        chat_stack.base_url,
        [{**sent, "hangUpAfterDeltas": 1}, {"do": "reconnect", "chatId": chat},
         {"do": "reconnect", "chatId": chat, "headers": mine}],
    )  # fmt: skip
    job_id = hung_up["message"]["id"]
    assert theirs is None  # the default tenant has no such chat
    done = await job(chat_stack, job_id, headers=mine)
    assert text_of(resumed["message"]) == done["result"]["text"]
    assert (await chat_stack.http.post(f"/api/chat/{chat}/stop")).status_code == 404
    refused = await chat_stack.http.post(
        "/api/chat", json={"id": chat, "messages": [user("u1", "x")]},
        headers={"Authorization": "Bearer not-a-key"},
    )  # fmt: skip
    assert refused.status_code == 401
