"""`POST /api/chat`'s body, as `DefaultChatTransport` sends it, read as a job's create.

The transport sends `{id, messages, trigger, messageId}` and whatever the app adds (`body` of
useChat or of sendMessage). The messages are UI messages, `{id, role, parts}`: each becomes
`{role, content}` of its text parts joined, the conversation the built-in `llm` job takes as
`messages`, or a job of the app's (`job` in the body, or JOBSTREAM_CHAT_JOB) as `input.messages`.
Every other field of the body is the job's own (`simulate`, `max_attempts`, `metadata`...), checked
as on /api/jobs. docs/chat.md has the whole mapping.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from jobstream import chats
from jobstream.jobspec import BUILT_IN_JOB
from jobstream.server.problems import Problem
from jobstream.server.validation import MAX_MESSAGES

CHAT_FIELDS = frozenset({"id", "messages", "trigger", "messageId"})
TRIGGERS = ("submit-message", "regenerate-message")
UI_ROLES = ("system", "user", "assistant")
# useChat's ids are 16 characters; the job's metadata holds the id (4 KB at most, any script).
MAX_CHAT_ID_CHARS = 256
# Parts that carry nothing a text job can read, and no meaning lost without it: the steps, the
# reasoning and the data parts a stream added (this server's progress among them), sources.
IGNORED_PARTS = ("step-start", "reasoning", "source-url", "source-document")


@dataclass(frozen=True)
class ChatRequest:
    chat_id: str
    job: dict[str, Any]  # a create's body, as /api/jobs takes it
    key: str  # the job's idempotency key (jobstream/chats.py)
    sent: dict[str, Any]  # what a replay of the key is compared by
    origins: list[int]  # for each message of the job, the index of its UI message


def parse(body: dict[str, Any], *, default_job: str) -> ChatRequest:
    """The job the body asks for, or a 422 naming every bad field."""
    errors: list[dict[str, str]] = []
    chat_id = body.get("id")
    if not isinstance(chat_id, str) or not 1 <= len(chat_id) <= MAX_CHAT_ID_CHARS:
        errors.append({"field": "id", "message": f"must be 1 to {MAX_CHAT_ID_CHARS} characters"})
    trigger = body.get("trigger")
    if trigger is not None and trigger not in TRIGGERS:
        errors.append({"field": "trigger", "message": f"must be one of {', '.join(TRIGGERS)}"})
    message_id = body.get("messageId")
    if message_id is not None and not isinstance(message_id, str):
        errors.append({"field": "messageId", "message": "must be a string"})
    ids, messages, origins = _messages(body.get("messages"), errors)
    if errors:
        raise invalid(errors)
    assert isinstance(chat_id, str)
    options = {k: v for k, v in body.items() if k not in CHAT_FIELDS and k != "job"}
    metadata = options.get("metadata")
    if metadata is None or isinstance(metadata, dict):
        # The job says which chat it answers (GET /api/jobs shows it); a bad metadata is left
        # for the job's validation to name.
        options["metadata"] = {**(metadata or {}), "chat_id": chat_id}
    name = body.get("job", default_job)
    if name == BUILT_IN_JOB:
        job = {"messages": messages, **options}
    else:
        job = {"job": name, "input": {"messages": messages}, **options}
    # Not the trigger: a regenerate of a message that never got an answer (its POST failed
    # after the job was made) finds that job, as a retried POST does.
    sent = {"chat": chat_id, "messageId": message_id, "messages": ids, "job": job}
    return ChatRequest(chat_id, job, chats.job_key(chat_id, sent), sent, origins)


def _messages(
    raw: Any, errors: list[dict[str, str]]
) -> tuple[list[str], list[dict[str, str]], list[int]]:
    """The UI messages' ids, the job's messages (those with text), and each one's UI index."""
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_MESSAGES:
        errors.append({"field": "messages", "message": f"must be a list of 1 to {MAX_MESSAGES}"})
        return [], [], []
    ids: list[str] = []
    messages: list[dict[str, str]] = []
    origins: list[int] = []
    for i, item in enumerate(raw):
        name = f"messages[{i}]"
        if not isinstance(item, dict):
            errors.append({"field": name, "message": "must be a UI message (id, role, parts)"})
            continue
        ui_id, role, parts = item.get("id"), item.get("role"), item.get("parts")
        if not isinstance(ui_id, str):
            errors.append({"field": f"{name}.id", "message": "must be a string"})
        else:
            ids.append(ui_id)
        if role not in UI_ROLES:
            roles = ", ".join(UI_ROLES)
            errors.append({"field": f"{name}.role", "message": f"must be one of {roles}"})
        text = _text(parts, f"{name}.parts", errors)
        if text and isinstance(role, str):
            messages.append({"role": role, "content": text})
            origins.append(i)
    if not errors and not messages:
        errors.append({"field": "messages", "message": "hold no text to answer"})
    return ids, messages, origins


def _text(parts: Any, name: str, errors: list[dict[str, str]]) -> str:
    """A message's text parts joined; other parts that carry text elsewhere are refused, not
    dropped: the answer would not be to what the user sent."""
    if not isinstance(parts, list):
        errors.append({"field": name, "message": "must be a list of parts"})
        return ""
    texts: list[str] = []
    for j, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            errors.append({"field": f"{name}[{j}]", "message": "must be a part with a type"})
        elif kind == "text":
            text = part.get("text")
            if isinstance(text, str):
                texts.append(text)
            else:
                errors.append({"field": f"{name}[{j}].text", "message": "must be a string"})
        elif kind not in IGNORED_PARTS and not kind.startswith("data-"):
            # Files, tool calls: jobstream's jobs take text.
            errors.append({"field": f"{name}[{j}]", "message": f"{kind} parts are not supported"})
    return "".join(texts)


def chat_job_problem(chat_job: str, jobs: Collection[str]) -> str | None:
    """Why JOBSTREAM_CHAT_JOB cannot be the chats' job here (None: it can): said at start, not
    as a 422 to every chat."""
    if chat_job == BUILT_IN_JOB or chat_job in jobs:
        return None
    known = ", ".join(sorted(jobs)) or "none: JOBSTREAM_APP is unset"
    return f"JOBSTREAM_CHAT_JOB={chat_job!r} is not a job of JOBSTREAM_APP (its jobs: {known})"


def job_field(request: ChatRequest, field: str) -> str:
    """A field as the job's validation names it, in the chat body's terms: the job's
    `messages[2].content` is the UI message it came from."""
    for prefix in ("input.messages[", "messages["):
        if field.startswith(prefix):
            index, _, rest = field[len(prefix) :].partition("]")
            if index.isdigit() and int(index) < len(request.origins):
                suffix = ".parts" if rest.startswith(".content") else rest
                return f"messages[{request.origins[int(index)]}]{suffix}"
            return "messages"
    if field.startswith("input."):
        return field.removeprefix("input.")
    return field


def invalid(errors: list[dict[str, str]]) -> Problem:
    return Problem(
        422, "validation", "Invalid request", f"{len(errors)} field(s) are invalid.", errors=errors
    )
