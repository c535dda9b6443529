"""jobstream: durable background jobs for long-running LLM calls, on PostgreSQL.

Your own code as jobs:

    import jobstream
    from pydantic import BaseModel

    app = jobstream.App()

    class Question(BaseModel):
        text: str

    @app.job("answer", input=Question)
    async def answer(question: Question, ctx: jobstream.Context) -> str:
        await ctx.progress(0.1, "thinking")
        return await ctx.llm.stream(prompt=question.text)

Run it with `JOBSTREAM_APP=yourmodule:app` for the server and the worker (docs/jobs.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobstream.app import App, JobDefinition
    from jobstream.context import LLM, Context, SyncContext
    from jobstream.errors import PermanentError, ProviderError, TransientError

# Loaded on first use: every process imports this package (`from jobstream import db`), and the
# CLI, which starts in a blink, need not import pydantic for it.
_EXPORTS = {
    "App": "jobstream.app",
    "JobDefinition": "jobstream.app",
    "LLM": "jobstream.context",
    "Context": "jobstream.context",
    "SyncContext": "jobstream.context",
    "PermanentError": "jobstream.errors",
    "ProviderError": "jobstream.errors",
    "TransientError": "jobstream.errors",
}

__all__ = [
    "LLM",
    "App",
    "Context",
    "JobDefinition",
    "PermanentError",
    "ProviderError",
    "SyncContext",
    "TransientError",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'jobstream' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
