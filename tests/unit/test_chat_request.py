"""server/chat_request.py: DefaultChatTransport's body as a job's create, and which requests
find the same job (jobstream/chats.py's keys)."""

from __future__ import annotations

from typing import Any

import pytest

from jobstream import chats
from jobstream.server.chat_request import ChatRequest, chat_job_problem, job_field, parse
from jobstream.server.problems import Problem


def ui(message_id: str, role: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"id": message_id, "role": role, "parts": list(parts)}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


CONVERSATION = [
    ui("u1", "user", text("Explain leases")),
    ui("a1", "assistant", {"type": "step-start"}, text("A lease "), text("is held."),
       {"type": "data-progress", "id": "progress", "data": {"fraction": 1}}),
    ui("u2", "user", text("And fencing?")),
]  # fmt: skip


def body(**changes: Any) -> dict[str, Any]:
    return {"id": "chat-1", "messages": CONVERSATION, "trigger": "submit-message",
            "messageId": None, **changes}  # fmt: skip


def asked(**changes: Any) -> ChatRequest:
    return parse(body(**changes), default_job="llm")


def test_ui_messages_become_the_built_in_jobs_messages() -> None:
    request = asked(simulate={"tokens": 3})
    assert request.job == {
        "messages": [
            {"role": "user", "content": "Explain leases"},
            {"role": "assistant", "content": "A lease is held."},
            {"role": "user", "content": "And fencing?"},
        ],
        "simulate": {"tokens": 3},
        "metadata": {"chat_id": "chat-1"},
    }
    assert request.chat_id == "chat-1"
    assert request.key.startswith(f"chat:{chats.chat_digest('chat-1')}:")
    assert len(request.key) <= 255


def test_a_job_of_the_apps_takes_the_messages_as_its_input() -> None:
    request = parse(body(metadata={"user": "ann"}), default_job="chat_reply")
    assert request.job["job"] == "chat_reply"
    assert len(request.job["input"]["messages"]) == 3
    assert request.job["metadata"] == {"user": "ann", "chat_id": "chat-1"}
    named = asked(job="chat_echo")
    assert named.job["job"] == "chat_echo"


def test_the_same_request_has_the_same_key_and_each_new_one_another() -> None:
    key = asked().key
    assert asked().key == key
    # A regenerate of a message that never got its answer finds the job made for it.
    assert asked(trigger="regenerate-message").key == key
    others = [
        asked(id="chat-2").key,
        asked(messageId="a1").key,  # a regenerate of an answer
        asked(messages=[*CONVERSATION[:2], ui("u3", "user", text("And fencing?"))]).key,
        asked(messages=[*CONVERSATION[:2], ui("u2", "user", text("And leases?"))]).key,  # edit
        asked(simulate={"tokens": 3}).key,
    ]
    assert len({key, *others}) == 1 + len(others)


def test_every_bad_field_is_named() -> None:
    with pytest.raises(Problem) as refused:
        parse(
            {"id": "", "trigger": "resume", "messageId": 3,
             "messages": [ui("u1", "robot", text("hi")), {"role": "user", "parts": [
                 {"type": "file", "url": "data:,x", "mediaType": "text/plain"}, {"no": "type"},
                 {"type": "text", "text": 4}]}]},
            default_job="llm",
        )  # fmt: skip
    assert refused.value.status == 422
    assert refused.value.errors is not None
    assert [e["field"] for e in refused.value.errors] == [
        "id", "trigger", "messageId", "messages[0].role", "messages[1].id",
        "messages[1].parts[0]", "messages[1].parts[1]", "messages[1].parts[2].text",
    ]  # fmt: skip
    with pytest.raises(Problem) as empty:
        parse(body(messages=[ui("a1", "assistant", {"type": "step-start"})]), default_job="llm")
    assert empty.value.errors == [{"field": "messages", "message": "hold no text to answer"}]


def test_the_jobs_field_names_are_the_chats() -> None:
    request = asked()  # the job's messages[1] is the UI message [1]; a message without text
    skipped = asked(messages=[ui("a0", "assistant"), *CONVERSATION])  # shifts them by one
    assert job_field(request, "messages[1].content") == "messages[1].parts"
    assert job_field(skipped, "messages[1].content") == "messages[2].parts"
    assert job_field(skipped, "input.messages[0].role") == "messages[1].role"
    assert job_field(request, "messages") == "messages"
    assert job_field(request, "simulate.tokens") == "simulate.tokens"
    assert job_field(request, "input.topic") == "topic"


def test_a_chat_job_that_is_not_the_apps_is_said_at_start() -> None:
    assert chat_job_problem("llm", []) is None
    assert chat_job_problem("chat_reply", ["chat_reply", "echo"]) is None
    assert chat_job_problem("chat_replay", ["chat_reply", "echo"]) == (
        "JOBSTREAM_CHAT_JOB='chat_replay' is not a job of JOBSTREAM_APP "
        "(its jobs: chat_reply, echo)"
    )
    assert "JOBSTREAM_APP is unset" in str(chat_job_problem("chat_reply", []))
