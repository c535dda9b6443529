"""The test app: jobs of the kinds users write (`@app.job`), for the tests of your own jobs, the
processes that load it by JOBSTREAM_APP (`tests.support.user_jobs:app`) and `make chaos`.

A handler tells the test what it met through `Probes`, one per job id: an in-process worker's
handler and the test share the loop. Nothing of it is product code.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

import jobstream
from jobstream.errors import PermanentError, TransientError

app = jobstream.App()


class Topic(BaseModel):
    topic: str = Field(min_length=1, max_length=200)
    provider: str = "openai"
    max_tokens: int = Field(default=6, ge=1, le=64)


@app.job("pipeline", input=Topic, max_attempts=3, timeout_s=60)
async def pipeline(topic: Topic, ctx: jobstream.Context) -> None:
    """Three model calls, each fed the last one's answer, with progress between them."""
    options = {"provider": topic.provider, "max_tokens": topic.max_tokens}
    await ctx.progress(0.0, "outline")
    outline = await ctx.llm.stream(prompt=f"outline {topic.topic}", **options)  # type: ignore[arg-type]
    await ctx.emit("\n")
    await ctx.progress(1 / 3, "draft")
    draft = await ctx.llm.stream(prompt=f"draft {outline}", **options)  # type: ignore[arg-type]
    await ctx.emit("\n")
    await ctx.progress(2 / 3, "polish")
    await ctx.llm.stream(prompt=f"polish {draft}", **options)  # type: ignore[arg-type]
    await ctx.progress(1.0, "done")


class Text(BaseModel):
    text: str = Field(min_length=1)


class Counted(BaseModel):
    words: int
    first: str


@app.job("count_words", input=Text, output=Counted)
def count_words(text: Text, ctx: jobstream.SyncContext) -> Counted:
    """A plain function (run in a thread): its context's methods are plain calls."""
    ctx.progress(0.5, "counting")
    ctx.emit(text.text.upper())
    words = text.text.split()
    return Counted(words=len(words), first=words[0])


@app.job("echo", input=Text)
async def echo(text: Text, ctx: jobstream.Context) -> str:
    """No text emitted: the returned string is the result's text."""
    return text.text


class Fail(BaseModel):
    kind: Literal["transient", "permanent", "error", "bad_output"]
    # Attempts that fail before one succeeds.
    failures: int = 99


@app.job("fail", input=Fail, output=Counted, max_attempts=3)
async def fail(asked: Fail, ctx: jobstream.Context) -> object:
    await ctx.emit(f"attempt {ctx.attempt} ")
    if ctx.attempt <= asked.failures:
        match asked.kind:
            case "transient":
                raise TransientError("the service is busy")
            case "permanent":
                raise PermanentError("this document cannot be read")
            case "error":
                raise KeyError("missing 'title'")
            case "bad_output":
                return {"words": "many"}
    return Counted(words=2, first="attempt")


class Held(BaseModel):
    prompt: str = "held"
    provider: str = "openai"


@dataclass
class Probe:
    """What a held job's handler met, for its test."""

    started: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    refused: list[str] = field(default_factory=list)


PROBES: dict[str, Probe] = {}


def probe(job_id: object) -> Probe:
    return PROBES.setdefault(str(job_id), Probe())


@app.job("held", input=Held, timeout_s=60, max_attempts=2)
async def held(asked: Held, ctx: jobstream.Context) -> None:
    """Emits, then waits in a model call (the test's fake holds it) or at the probe's gate."""
    seen = probe(ctx.job_id)
    await ctx.emit(f"attempt {ctx.attempt} began. ")
    await ctx.progress(0.1, "holding")
    seen.started.set()
    try:
        if asked.provider == "gate":
            await seen.gate.wait()
        else:
            await ctx.llm.stream(prompt=asked.prompt, provider=asked.provider)
    except asyncio.CancelledError:
        seen.cancelled.set()
        raise
    # Past the gate: a zombie attempt tries every write it has.
    try:
        await ctx.progress(0.9, "late")
    except jobstream.errors.Fenced:
        seen.refused.append("progress")
        raise
    await ctx.emit("late text")
    await ctx.emit("finished.")


class Budgeted(BaseModel):
    calls: int = 3


@app.job("budgeted", input=Budgeted, max_cost_usd=0.0001, max_attempts=1)
async def budgeted(asked: Budgeted, ctx: jobstream.Context) -> None:
    for i in range(asked.calls):
        await ctx.llm.stream(prompt=f"call {i}", provider="openai", max_tokens=8)


class Counted2(BaseModel):
    tokens: int = Field(ge=2, le=10_000)


def halves(tokens: int) -> tuple[int, int]:
    return tokens // 2, tokens - tokens // 2


@app.job("two_calls", input=Counted2, max_attempts=10, timeout_s=120)
async def two_calls(asked: Counted2, ctx: jobstream.Context) -> None:
    """Two simulated calls of counted tokens, progress between: `make chaos`'s job of its own,
    whose exact text is known (tests.support.chaos)."""
    for n, part in enumerate(halves(asked.tokens)):
        await ctx.progress(n / 2, f"call {n + 1}")
        simulate = {"tokens": part, "pattern": "count", "tokens_per_second": 40,
                    "first_token_delay_s": 0}  # fmt: skip
        await ctx.llm.stream(
            prompt="count", provider="simulated", max_tokens=part, simulate=simulate
        )


class Models(BaseModel):
    models: list[str] = Field(min_length=1, max_length=4)


@app.job("ask_models", input=Models, max_attempts=1, timeout_s=60)
async def ask_models(asked: Models, ctx: jobstream.Context) -> None:
    """One OpenAI call per model named, in turn: an attempt whose calls are priced apart."""
    for model in asked.models:
        await ctx.llm.stream(prompt=f"ask {model}", provider="openai", model=model, max_tokens=4)


@app.job("three_steps", input=Topic, max_attempts=3, timeout_s=60)
async def three_steps(topic: Topic, ctx: jobstream.Context) -> None:
    """Three model calls, each a durable step fed the last one's answer."""
    options = {"provider": topic.provider, "max_tokens": topic.max_tokens}
    first = await ctx.step("first", ctx.llm.stream, prompt=f"first {topic.topic}", **options)
    await ctx.progress(1 / 3, "first done")
    second = await ctx.step("second", ctx.llm.stream, prompt=f"second {first}", **options)
    await ctx.progress(2 / 3, "second done")
    await ctx.step("third", ctx.llm.stream, prompt=f"third {second}", **options)


class Answers(BaseModel):
    answers: dict[str, str]


@app.job("fan_out", input=Topic, output=Answers, max_attempts=3, timeout_s=60)
async def fan_out(topic: Topic, ctx: jobstream.Context) -> Answers:
    """Three model calls at once, each a durable step of its own."""
    options = {"provider": topic.provider, "max_tokens": topic.max_tokens}
    names = ("north", "east", "south")
    answers = await asyncio.gather(
        *(ctx.step(n, ctx.llm.stream, prompt=f"{n} {topic.topic}", **options) for n in names)
    )
    return Answers(answers=dict(zip(names, answers, strict=True)))


class Rated(BaseModel):
    title: str
    score: int = Field(ge=1, le=5)
    tags: list[str]


@app.job("rate", input=Topic, output=Rated, max_attempts=3, timeout_s=60)
async def rate(topic: Topic, ctx: jobstream.Context) -> Rated:
    """A structured answer: ctx.llm.parse, after a step of its own."""
    seen["previous_failures"].append(ctx.previous_failure)
    notes = await ctx.step("notes", notes_of, topic.topic)
    return await ctx.llm.parse(
        Rated, prompt=f"rate {topic.topic} {notes}", provider=topic.provider, max_tokens=64
    )


def notes_of(topic: str) -> str:
    """A plain function as a step (it runs in a thread)."""
    seen["notes_runs"].append(topic)
    return f"notes on {topic}"


# What the structured job's runs met, for its tests (one test at a time uses it).
seen: dict[str, list[Any]] = {"previous_failures": [], "notes_runs": []}
