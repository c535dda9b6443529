"""The jobs bench_user_jobs measures (JOBSTREAM_APP=bench.user_jobs_app:app): a no-op, and a
job that emits counted tokens as fast as it can, the built-in job's simulated stream's twin."""

from __future__ import annotations

from pydantic import BaseModel

import jobstream

app = jobstream.App()


class Nothing(BaseModel):
    pass


@app.job("noop", input=Nothing)
async def noop(_: Nothing, ctx: jobstream.Context) -> None:
    return None


class Tokens(BaseModel):
    tokens: int


@app.job("emit", input=Tokens)
async def emit(asked: Tokens, ctx: jobstream.Context) -> None:
    for i in range(asked.tokens):
        await ctx.emit(f"{i} ")


class Steps(BaseModel):
    steps: int


async def nothing(i: int) -> int:
    return i


@app.job("steps", input=Steps)
async def steps(asked: Steps, ctx: jobstream.Context) -> None:
    for i in range(asked.steps):
        await ctx.step("nothing", nothing, i)
