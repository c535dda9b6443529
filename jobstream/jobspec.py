"""What a job asks for: the validated request, as stored in `jobs.payload`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

# One attempt's limit unless the job sets timeout_s: long enough for a reasoning model's
# minutes-long answer. A stalled call is caught sooner by the provider's first-token and idle
# limits (JOBSTREAM_OPENAI_FIRST_TOKEN_TIMEOUT_S, JOBSTREAM_OPENAI_IDLE_TIMEOUT_S).
DEFAULT_TIMEOUT_S = 1800.0

# The name of the built-in job: one prompt (or conversation) to one model.
BUILT_IN_JOB = "llm"

_SINCE_V1 = frozenset(
    {"run_at", "delay_s", "messages", "instructions", "temperature", "top_p", "retain_s", "job",
     "input", "max_cost_usd", "invalid_output_retries"}
)  # fmt: skip

# A chat message as stored: {"role": "system" | "developer" | "user" | "assistant", "content"}.
Message = dict[str, str]


def chat(prompt: str, messages: list[Message] | None, instructions: str | None) -> list[Message]:
    """The conversation a chat model is sent: the instructions as a leading system message, then
    the messages, or the prompt as the one user message."""
    head = [{"role": "system", "content": instructions}] if instructions is not None else []
    return head + (messages if messages is not None else [{"role": "user", "content": prompt}])


def prompt_of(messages: list[Message]) -> str:
    """What stands for a conversation where one text is shown or used: its last user message
    (the page's prompt, the simulated provider's words), else its last message."""
    users = [m for m in messages if m["role"] == "user"]
    return (users or messages)[-1]["content"]


@dataclass
class JobSpec:
    """A validated request. Read it, never set it: the same spec may stand for many jobs.

    Not frozen, like rows.JobRow: a frozen __init__ sets each of its 18 fields through
    object.__setattr__, 2.5-4.4 µs a spec against 0.6-1.0, and a batch create makes 1,000. Not
    slotted either: request_hash reads vars().
    """

    prompt: str
    provider: str
    model: str | None = None
    max_tokens: int = 512
    priority: int = 0
    max_attempts: int = 3
    retry_unknown: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    webhook_url: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    simulate: dict[str, Any] = field(default_factory=dict)
    # Not before this time, or this many seconds after the create (at most one of the two).
    run_at: datetime | None = None
    delay_s: float | None = None
    # A conversation instead of one prompt (`prompt` is then prompt_of(messages)), a system
    # prompt sent before it, and sampling passed upstream as given.
    messages: list[Message] | None = None
    instructions: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    # Seconds to keep the job after it ends (None: JOBSTREAM_RETENTION_S); stored in its own
    # column (jobs.retain_s), not in the payload: the worker never needs it.
    retain_s: int | None = None
    # A job of the app's own (jobstream/app.py): its name and validated input (as JSON). None
    # for the built-in job, whose input is the fields above.
    job: str | None = None
    input: Any = None
    # The most the job may spend across its calls and attempts (a user job's ctx.llm calls).
    max_cost_usd: float | None = None
    # How many times an answer that fails its model is asked again (None: 2).
    invalid_output_retries: int | None = None

    @property
    def job_name(self) -> str:
        return self.job if self.job is not None else BUILT_IN_JOB

    def payload(self) -> dict[str, Any]:
        """What the worker needs to run an attempt (stored as jobs.payload)."""
        if self.job is not None:
            own: dict[str, Any] = {
                "input": self.input,
                "retry_unknown": self.retry_unknown,
                "timeout_s": self.timeout_s,
            }
            if self.max_cost_usd is not None:
                own["max_cost_usd"] = self.max_cost_usd
            if self.invalid_output_retries is not None:
                own["invalid_output_retries"] = self.invalid_output_retries
            return own
        payload: dict[str, Any] = {
            "prompt": self.prompt,
            "model": self.model,
            "max_tokens": self.max_tokens,
            "retry_unknown": self.retry_unknown,
            "timeout_s": self.timeout_s,
            "simulate": self.simulate,
        }
        # Only when set: a job asking for none of these stores what it stored before them.
        if self.messages is not None:
            payload["messages"] = self.messages
        if self.instructions is not None:
            payload["instructions"] = self.instructions
        if self.temperature is not None or self.top_p is not None:
            payload["sampling"] = self.sampling()
        return payload

    def sampling(self) -> dict[str, float]:
        given = {"temperature": self.temperature, "top_p": self.top_p}
        return {name: value for name, value in given.items() if value is not None}

    def request_hash(self) -> str:
        """A digest of the whole request, key order ignored: same body, same hash."""
        # vars(), not asdict(): asdict deep-copies every nested value first, a quarter of a batch
        # create's time; orjson reads the nested dicts and the datetime as they are.
        # Fields added since version 1 count only when set, so that a request made before an
        # upgrade still matches its job after it.
        # A copy less the unset newer fields: half the time of a comprehension over all 18.
        fields = vars(self).copy()
        for name in _SINCE_V1:
            if fields[name] is None:
                del fields[name]
        canonical = orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(canonical).hexdigest()


@dataclass(frozen=True)
class AttemptSpec:
    """One attempt's view of its job's payload."""

    prompt: str
    model: str | None
    max_tokens: int
    retry_unknown: bool
    timeout_s: float
    simulate: dict[str, Any]
    messages: list[Message] | None = None
    instructions: str | None = None
    sampling: dict[str, float] = field(default_factory=dict)
    # A job of the app's own: its input as stored (JSON), its spending cap, and how many times
    # an answer that fails its model is asked again.
    input: Any = None
    max_cost_usd: float | None = None
    invalid_output_retries: int = 2

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> AttemptSpec:
        cap = payload.get("max_cost_usd")
        return cls(
            prompt=payload.get("prompt", ""),
            model=payload.get("model"),
            max_tokens=int(payload.get("max_tokens", 512)),
            retry_unknown=bool(payload.get("retry_unknown", False)),
            timeout_s=float(payload.get("timeout_s", DEFAULT_TIMEOUT_S)),
            simulate=dict(payload.get("simulate") or {}),
            messages=payload.get("messages"),
            instructions=payload.get("instructions"),
            sampling=dict(payload.get("sampling") or {}),
            input=payload.get("input"),
            max_cost_usd=float(cap) if cap is not None else None,
            invalid_output_retries=int(payload.get("invalid_output_retries", 2)),
        )
