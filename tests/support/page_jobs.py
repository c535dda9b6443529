"""The page's test app: the jobs of tests.support.user_jobs, and two made for the page's tests
(tests/e2e/test_page_jobs.py), loaded by `JOBSTREAM_APP=tests.support.page_jobs:app`.

- `steps` streams slowly through the simulated provider, in steps, with progress between them:
  its text is the count pattern's ("0 1 2 … ") once per step, so a test knows the exact text.
- `retried` reports half its progress and fails its first attempt: a retry clears the bar.
- `review` has an input field of every kind the page's form builds, and a structured output.

The page builds a form field from each input property's JSON Schema (static/form.js): a string
is a one-line input, or a textarea when the schema has `"format": "textarea"`
(`json_schema_extra`) or allows more than 200 characters (`maxLength` > 200); an integer or a
number is a number input with the schema's minimum and maximum; a boolean a checkbox; an enum
or a `Literal` a select.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

import jobstream
from jobstream.errors import TransientError
from tests.support import user_jobs

app = jobstream.App()
app.include(user_jobs.app)

STEP_TOKENS = 40


class Steps(BaseModel):
    steps: int = Field(default=3, ge=1, le=10, description="Model calls, one after another.")
    tokens_per_second: float = Field(default=20, gt=0, le=1000)


@app.job("steps", input=Steps, timeout_s=120)
async def steps(asked: Steps, ctx: jobstream.Context) -> None:
    """Counts to 40 once a step, through the simulated provider, with progress between steps."""
    for step in range(asked.steps):
        await ctx.progress(step / asked.steps, f"step {step + 1} of {asked.steps}")
        await ctx.llm.stream(
            prompt=f"step {step + 1}",
            provider="simulated",
            max_tokens=STEP_TOKENS,
            simulate={
                "tokens": STEP_TOKENS,
                "pattern": "count",
                "tokens_per_second": asked.tokens_per_second,
                "first_token_delay_s": 0,
            },
        )
    await ctx.progress(1.0, "done")


class Nothing(BaseModel):
    pass


@app.job("retried", input=Nothing, max_attempts=2)
async def retried(_: Nothing, ctx: jobstream.Context) -> None:
    """Half way, then a failure on its first attempt; the second goes to the end."""
    await ctx.progress(0.5, f"attempt {ctx.attempt}")
    await ctx.emit(f"attempt {ctx.attempt} ")
    if ctx.attempt == 1:
        raise TransientError("the service is busy")
    await ctx.progress(1.0, "done")


class Review(BaseModel):
    title: str = Field(min_length=1, max_length=80, description="What the document is called.")
    text: str = Field(
        min_length=1, max_length=20_000, title="Document", description="The text to review."
    )
    notes: str = Field(default="", json_schema_extra={"format": "textarea"})
    keywords: int = Field(default=3, ge=1, le=10, title="Key words")
    strict: bool = Field(default=False, description="Count every word, short ones too.")
    tone: Literal["plain", "formal", "playful"] = "plain"

    # A rule only the server knows: the page learns of it from the 422.
    @field_validator("title")
    @classmethod
    def not_shouted(cls, value: str) -> str:
        if value.isupper():
            raise ValueError("must not be all capitals")
        return value


class Keyword(BaseModel):
    word: str
    count: int


class Stats(BaseModel):
    words: int
    longest_word: str


class Reviewed(BaseModel):
    title: str
    tone: str
    strict: bool
    stats: Stats
    keywords: list[Keyword]
    tags: list[str]
    notes: str | None


@app.job("review", input=Review, output=Reviewed)
async def review(asked: Review, ctx: jobstream.Context) -> Reviewed:
    """Reviews a document: a sentence of text, and the review as structured output."""
    await ctx.progress(0.5, "reading")
    words = [w.strip(".,;:!?").lower() for w in asked.text.split()]
    words = [w for w in words if w and (asked.strict or len(w) > 3)]
    counts: dict[str, int] = {}
    for word in words:
        counts[word] = counts.get(word, 0) + 1
    top = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[: asked.keywords]
    await ctx.emit(f"Reviewed “{asked.title}” in a {asked.tone} tone: {len(words)} words.")
    await ctx.progress(1.0, "done")
    return Reviewed(
        title=asked.title,
        tone=asked.tone,
        strict=asked.strict,
        stats=Stats(words=len(words), longest_word=max(words, key=len, default="")),
        keywords=[Keyword(word=w, count=n) for w, n in top],
        tags=[asked.tone, "strict" if asked.strict else "lenient"],
        notes=asked.notes or None,
    )
