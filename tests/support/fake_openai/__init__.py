"""A fake OpenAI-compatible server on a real loopback port: a small Starlette app under a real
uvicorn, in a thread of its own so it answers even while a test blocks.

It streams the real chunk format (`chat.completion.chunk` objects, a usage chunk when asked for
with `stream_options.include_usage`, then `data: [DONE]`), with deterministic text: token i is
the i-th word of the prompt (cycling), see `expected_text`.

How a request misbehaves is chosen per request, first match wins:
1. a script the test queued: `fake.push(Reply(...), ...)` or `POST /_script` (a JSON list);
2. a marker in the prompt: `[[fake:kind=error;status=429;retry_after=2]]` (`Reply.marker()`
   writes one), optionally `times=N` to misbehave only on the first N requests with that prompt;
3. the default: a normal stream.

Counters (`fake.stats()` in-process, `GET /_stats` from anywhere, `POST /_reset` to clear):
requests, in-flight now and the maximum seen, outcomes, and the tokens billed: what a real
provider would charge, i.e. prompt tokens plus every completion token sent, also for streams
that died midway. Every request records when it began and ended (wall clock, `time.time()`).

A request is in flight from when the fake has read it until the fake starts writing the bytes
that end its answer (`[DONE]`, an error status or chunk, or closing the connection on a drop),
or learns that the client left. Ending it *before* those bytes go out means a client that reacts
to the end at once (and sends its next request) is never counted twice.

    async with FakeOpenAI(api_key="sk-test") as fake:
        settings = Settings(openai_base_url=fake.base_url, openai_api_key="sk-test")
        fake.push(Reply(kind="hang", after_tokens=3))
        ...
        await fake.wait_until(lambda s: s.in_flight == 0)

From another process: `python -m tests.support.fake_openai [--port N] [--api-key K]` prints
`{"url": ..., "base_url": ...}` on its first line and serves until SIGTERM or SIGINT.

The parts: `replies` (how to answer), `oracle` (the text an answer holds), `recording` (what
was asked and sent), `sse` (writing one answer), `app` (the routes), `server` (the thread).
"""

from tests.support.fake_openai.oracle import expected_text, prompt_tokens, token_text, words_of
from tests.support.fake_openai.recording import RequestRecord, Stats
from tests.support.fake_openai.replies import DEFAULT_TOKENS, Reply, ReplyKind
from tests.support.fake_openai.server import FakeOpenAI, fetch_stats

__all__ = [
    "DEFAULT_TOKENS",
    "FakeOpenAI",
    "Reply",
    "ReplyKind",
    "RequestRecord",
    "Stats",
    "expected_text",
    "fetch_stats",
    "prompt_tokens",
    "token_text",
    "words_of",
]
