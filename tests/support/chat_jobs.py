"""The chat tests' app (`JOBSTREAM_APP=tests.support.chat_jobs:app`): jobs of the app's that a
chat names (`job` in POST /api/chat's body), whose input takes the chat's `messages`."""

from __future__ import annotations

from pydantic import BaseModel

import jobstream

app = jobstream.App()

REPLY_TOKENS = 30


class Conversation(BaseModel):
    messages: list[dict[str, str]]  # {role, content}: POST /api/chat's messages, as text


@app.job("chat_reply", input=Conversation)
async def chat_reply(conversation: Conversation, ctx: jobstream.Context) -> None:
    """The answer to the last message through the simulated provider, with progress around it."""
    await ctx.progress(0.0, "reading")
    await ctx.llm.stream(
        messages=conversation.messages, provider="simulated", max_tokens=REPLY_TOKENS,
        simulate={"tokens": REPLY_TOKENS, "tokens_per_second": 0, "first_token_delay_s": 0},
    )  # fmt: skip
    await ctx.progress(1.0, "answered")


@app.job("chat_echo", input=Conversation)
async def chat_echo(conversation: Conversation, ctx: jobstream.Context) -> str:
    """No text emitted: the result's text is the one returned."""
    return f"you said: {conversation.messages[-1]['content']}"
