"""The official `openai` SDK, sync and async, unchanged but for `base_url` and `api_key`, drives
jobstream's /v1 facade on a live server and worker (real processes, one pair for the module).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from jobstream import db, tenants
from jobstream.server.app import create_app
from jobstream.server.v1 import ids
from jobstream.settings import Settings
from tests.e2e.conftest import OUTPUT_DIR, Stack
from tests.support import database
from tests.support.http_server import serve
from tests.support.polling import eventually_blocking
from tests.support.processes import processes
from tests.support.simulated_text import expected_text

MODEL = "sim-1"
PROMPT = "the quick brown fox"
# No pauses: a job of these ends within a few flushes.
FAST = {"tokens": 12, "tokens_per_second": 0, "first_token_delay_s": 0}
# Long enough (0.6 s) that a stream is hung up on, and resumed, while the job still writes.
PACED = {"tokens": 60, "tokens_per_second": 100, "first_token_delay_s": 0}
TERMINAL = ("completed", "failed", "cancelled", "incomplete")


@pytest.fixture(scope="module")
async def sdk_stack(admin_url: str, template_ready: None) -> AsyncIterator[Stack]:
    """One database, server and worker for the whole module: starting them is most of its
    cost, and every test makes jobs of its own."""
    url = await database.create_test_database(admin_url)
    logs = OUTPUT_DIR / "e2e" / "test_openai_sdk"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    try:
        with processes(logs) as group:
            stack = Stack(group, url)
            try:
                await stack.start()
                yield stack
            finally:
                await stack.aclose()
    finally:
        await database.drop_test_database(admin_url, url)


@pytest.fixture(scope="module")
def client(sdk_stack: Stack) -> Iterator[OpenAI]:
    # API keys are off: any bearer value is the default tenant.
    with OpenAI(base_url=f"{sdk_stack.base_url}/v1", api_key="sk-anything") as sdk:
        yield sdk


def job(stack: Stack, response_id: str) -> dict[str, Any]:
    """The response's job, as /api/jobs shows it: the truth the SDK's view is held to."""
    job_id = ids.job_id(response_id)
    assert job_id is not None, response_id
    found = httpx.get(f"{stack.base_url}/api/jobs/{job_id}", timeout=10)
    assert found.status_code == 200, found.text
    body: dict[str, Any] = found.json()
    return body


def finished(client: OpenAI, response_id: str, *, timeout_s: float = 20) -> Any:
    return eventually_blocking(
        lambda: client.responses.retrieve(response_id),
        lambda response: response.status in TERMINAL,
        what=f"{response_id} finished",
        timeout_s=timeout_s,
        interval_s=0.05,
    )


def test_background_create_then_poll_to_completed(client: OpenAI, sdk_stack: Stack) -> None:
    created = client.responses.create(
        model=MODEL, input=PROMPT, background=True, metadata={"ticket": "42"},
        extra_body={"simulate": FAST},
    )  # fmt: skip
    assert created.id.startswith("resp_")
    assert created.status in ("queued", "in_progress")
    assert created.metadata == {"ticket": "42"}
    done = finished(client, created.id)
    assert done.status == "completed"
    assert done.output_text == expected_text(PROMPT, FAST["tokens"])
    assert done.output_text == job(sdk_stack, done.id)["result"]["text"]
    assert done.usage is not None
    assert (done.usage.input_tokens, done.usage.output_tokens) == (4, FAST["tokens"])
    assert done.usage.total_tokens == 4 + FAST["tokens"]
    assert done.model == MODEL


def test_stream_hang_up_then_resume_after_n(client: OpenAI, sdk_stack: Stack) -> None:
    stream = client.responses.create(
        model=MODEL, input=PROMPT, background=True, stream=True, extra_body={"simulate": PACED}
    )
    response_id = ""
    text = ""
    deltas = 0
    for event in stream:
        if event.type == "response.created":
            response_id = event.response.id
        if event.type == "response.output_text.delta":
            text += event.delta
            deltas += 1
            if deltas == 2:
                last = event.sequence_number
                break
    stream.close()  # hang up mid-way; the job runs on
    resumed = client.responses.retrieve(response_id, stream=True, starting_after=last)
    events = list(resumed)
    numbers = [event.sequence_number for event in events]
    assert numbers and min(numbers) > last, "an event at or before the cursor came again"
    assert numbers == sorted(set(numbers)), "sequence numbers must rise strictly"
    text += "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert events[-1].type == "response.completed"
    assert text == expected_text(PROMPT, PACED["tokens"])
    assert text == job(sdk_stack, response_id)["result"]["text"]
    # A replay from the same cursor is the same events, numbered the same.
    again = client.responses.retrieve(response_id, stream=True, starting_after=last)
    assert [(e.sequence_number, e.type) for e in again] == [
        (e.sequence_number, e.type) for e in events
    ]


def test_strict_stream_helper_resumes_after_n(client: OpenAI, sdk_stack: Stack) -> None:
    created = client.responses.create(
        model=MODEL, input=PROMPT, background=True, extra_body={"simulate": PACED}
    )
    first = client.responses.retrieve(created.id, stream=True)
    for event in first:
        if event.type == "response.output_text.delta":
            after = event.sequence_number
            break
    first.close()
    with client.responses.stream(response_id=created.id, starting_after=after) as stream:
        numbers = [event.sequence_number for event in stream]
        final = stream.get_final_response()
    assert numbers and min(numbers) > after
    assert final.status == "completed"
    assert final.output_text == job(sdk_stack, created.id)["result"]["text"]


def test_a_retry_after_partial_text_followed_live_ends_with_the_result(
    client: OpenAI, sdk_stack: Stack
) -> None:
    """Attempt 1 fails after 5 tokens; attempt 2 succeeds. Each attempt is an output item; the
    failed one is closed `incomplete`, and the final response holds only the accepted one."""
    simulate = {
        "tokens": 20, "tokens_per_second": 400, "first_token_delay_s": 0,
        "faults": [{"attempt": 1, "after_tokens": 5, "kind": "transient"}],
    }  # fmt: skip
    done_items: list[Any] = []
    with client.responses.stream(
        model=MODEL, input=PROMPT, background=True, extra_body={"simulate": simulate}
    ) as stream:
        for event in stream:
            if event.type == "response.output_item.done":
                assert event.item.type == "message"
                done_items.append((event.output_index, event.item.status, event.item.id))
        final = stream.get_final_response()
    assert [(index, status) for index, status, _ in done_items] == [
        (0, "incomplete"),
        (1, "completed"),
    ]
    assert done_items[0][2] != done_items[1][2]
    result = job(sdk_stack, final.id)
    assert result["attempts"] == 2
    assert final.output_text == result["result"]["text"] == expected_text(PROMPT, 20)
    assert [getattr(item, "id", None) for item in final.output] == [done_items[1][2]]


def test_cancel_of_a_running_response_ends_cancelled(client: OpenAI) -> None:
    slow = {"tokens": 400, "tokens_per_second": 20, "first_token_delay_s": 0}
    created = client.responses.create(
        model=MODEL, input=PROMPT, background=True, extra_body={"simulate": slow}
    )
    eventually_blocking(
        lambda: client.responses.retrieve(created.id).status,
        lambda status: status == "in_progress",
        what="the response runs",
        interval_s=0.05,
    )
    with pytest.raises(openai.ConflictError):
        client.responses.delete(created.id)  # a running response is not deleted
    cancelled = client.responses.cancel(created.id)
    assert cancelled.status in ("in_progress", "cancelled")  # the worker confirms
    assert finished(client, created.id).status == "cancelled"
    events = list(client.responses.retrieve(created.id, stream=True))
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.status == "cancelled"
    assert client.responses.cancel(created.id).status == "cancelled"  # idempotent
    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)


def test_an_unknown_id_raises_not_found(client: OpenAI) -> None:
    for unknown in (ids.response_id(uuid.uuid4()), "resp_not-an-id", str(uuid.uuid4())):
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(unknown)
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel(ids.response_id(uuid.uuid4()))
    with pytest.raises(openai.NotFoundError):
        list(client.responses.retrieve(ids.response_id(uuid.uuid4()), stream=True))


def test_without_background_the_call_waits_for_the_answer(client: OpenAI) -> None:
    conversation: Any = [
        {"role": "user", "content": "an earlier question"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "an answer"}]},
        {"role": "user", "content": [{"type": "input_text", "text": PROMPT}]},
    ]
    response = client.responses.create(
        model=MODEL,
        instructions="Answer in the words of the question.",
        input=conversation,
        extra_body={"simulate": FAST},
    )
    assert response.status == "completed"
    # The simulated provider writes the last user message's words.
    assert response.output_text == expected_text(PROMPT, FAST["tokens"])
    assert response.instructions == "Answer in the words of the question."


def test_idempotency_key_and_bad_input_answer_as_openai_does(client: OpenAI) -> None:
    key = {"Idempotency-Key": f"sdk-{uuid.uuid4()}"}
    body: dict[str, Any] = {"model": MODEL, "input": PROMPT, "background": True}
    first = client.responses.create(**body, extra_headers=key, extra_body={"simulate": FAST})
    again = client.responses.create(**body, extra_headers=key, extra_body={"simulate": FAST})
    assert again.id == first.id
    with pytest.raises(openai.ConflictError):
        client.responses.create(**body, extra_headers=key, extra_body={"simulate": PACED})
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        client.responses.create(model=MODEL, input=PROMPT, tools=[{"type": "web_search"}])
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["param"] == "tools"
    not_text: Any = [{"role": "user", "content": 7}]
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        client.responses.create(model=MODEL, input=not_text)
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["param"] == "input[0].content"


async def test_async_client_streams_to_completed(sdk_stack: Stack) -> None:
    async with AsyncOpenAI(base_url=f"{sdk_stack.base_url}/v1", api_key="sk-any") as client:
        stream = await client.responses.create(
            model=MODEL, input=PROMPT, background=True, stream=True,
            extra_body={"simulate": FAST},
        )  # fmt: skip
        kinds: list[str] = []
        text = ""
        response_id = ""
        async for event in stream:
            kinds.append(event.type)
            if event.type == "response.created":
                response_id = event.response.id
            if event.type == "response.output_text.delta":
                text += event.delta
        assert kinds[:2] == ["response.created", "response.queued"]
        assert kinds[-1] == "response.completed"
        assert text == expected_text(PROMPT, FAST["tokens"])
        # The async strict helper replays it from the start to the same answer.
        async with client.responses.stream(response_id=response_id) as helper:
            final = await helper.get_final_response()
        assert final.output_text == text


async def test_with_keys_on_a_wrong_key_raises_authentication_error(sdk_stack: Stack) -> None:
    url = sdk_stack.env["DATABASE_URL"]
    conn = await db.connect(url)
    try:
        key = await tenants.create(conn, f"sdk-{uuid.uuid4().hex[:8]}")
    finally:
        await conn.close()
    settings = Settings(database_url=url, require_api_key=True, secret_key="e2e-test-secret")
    async with serve(create_app(settings)) as base_url:
        wrong = AsyncOpenAI(base_url=f"{base_url}/v1", api_key="js_not-a-key")
        right = AsyncOpenAI(base_url=f"{base_url}/v1", api_key=key)
        async with wrong, right:
            with pytest.raises(openai.AuthenticationError):
                await wrong.responses.create(model=MODEL, input=PROMPT, background=True)
            with pytest.raises(openai.AuthenticationError):
                await wrong.responses.retrieve(ids.response_id(uuid.uuid4()))
            created = await right.responses.create(
                model=MODEL, input=PROMPT, background=True, extra_body={"simulate": FAST}
            )
            assert (await right.responses.retrieve(created.id)).id == created.id


async def test_delete_removes_a_finished_response_and_all_its_rows(sdk_stack: Stack) -> None:
    async with AsyncOpenAI(base_url=f"{sdk_stack.base_url}/v1", api_key="sk-any") as client:
        created = await client.responses.create(
            model=MODEL, input=PROMPT, extra_body={"simulate": FAST}
        )  # no background: answered once finished
        assert created.status == "completed"
        await client.responses.delete(created.id)
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(created.id)
        with pytest.raises(openai.NotFoundError):
            await client.responses.delete(created.id)
    conn = await db.connect(sdk_stack.env["DATABASE_URL"])
    try:
        left = await conn.fetchval(
            "SELECT (SELECT count(*) FROM jobs WHERE id = $1)"
            " + (SELECT count(*) FROM job_events WHERE job_id = $1)"
            " + (SELECT count(*) FROM job_attempts WHERE job_id = $1)"
            " + (SELECT count(*) FROM tenant_jobs WHERE job_id = $1)",
            ids.job_id(created.id),
        )
    finally:
        await conn.close()
    assert left == 0
