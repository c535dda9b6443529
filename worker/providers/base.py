"""The provider interface: a stream of text deltas, then the usage.

A provider raises jobstream.errors.ProviderError, with its kind, for every failure it can
classify; the attempt runner treats anything else as a transient bug of ours.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

from jobstream.jobspec import Message, chat
from jobstream.prices import Price
from jobstream.usage import Usage


class SendMark:
    """Set by a provider the moment its request starts going out.

    The attempt's own timeout can fire at any point; before the request was sent the failure is
    safely retryable (transient), after it the provider may be working and billing (unknown).
    """

    def __init__(self) -> None:
        self.sent = False

    def mark(self) -> None:
        self.sent = True


class Prompt(Protocol):
    """What a price estimate reads of a request (its model and its text): the ProviderRequest of
    an attempt, or the JobSpec of a create (no ProviderRequest built for each item of a batch of
    1,000)."""

    @property
    def prompt(self) -> str: ...
    @property
    def messages(self) -> list[Message] | None: ...
    @property
    def instructions(self) -> str | None: ...
    @property
    def model(self) -> str | None: ...


class Finish:
    """Set by a provider as its answer ends: why the model stopped (`stop`, `length` at the
    token limit, `content_filter`, `refusal`...), and a refusal's text when it sent one."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.refusal: str | None = None


@dataclass(frozen=True)
class ProviderRequest:
    prompt: str
    model: str | None
    max_tokens: int
    attempt: int
    # Fields of the job's `simulate` object; only the simulated provider reads them.
    simulate: dict[str, Any] = field(default_factory=dict)
    send_mark: SendMark = field(default_factory=SendMark)
    # A conversation instead of the prompt alone (the prompt is then its last user message), a
    # system prompt, and sampling parameters (temperature, top_p) for a model that takes them.
    messages: list[Message] | None = None
    instructions: str | None = None
    sampling: dict[str, float] = field(default_factory=dict)
    # Structured output: {"name", "schema", "strict"} (OpenAI's json_schema response format).
    json_schema: dict[str, Any] | None = None
    finish: Finish = field(default_factory=Finish)

    def chat(self) -> list[Message]:
        """The conversation as a chat model is sent it."""
        return chat(self.prompt, self.messages, self.instructions)


@dataclass(frozen=True)
class TextDelta:
    text: str


StreamItem = TextDelta | Usage


class Provider(Protocol):
    name: str

    def stream(self, request: ProviderRequest) -> AsyncIterator[StreamItem]:
        """Yield TextDelta items as the model writes, and one Usage item last.

        Cancelling the consumer (or `aclose()`) must close the underlying request.
        """
        ...

    def price(self, request: Prompt) -> Price:
        """The catalogue's price of a call for `request` (its model, or the provider's default
        model when it names none), and how it was found (jobstream/prices.py)."""
        ...

    def estimate_cost(self, request: Prompt, output_tokens: int) -> Decimal:
        """Our price estimate: the reservation at create time, and the cost of an attempt
        whose outcome is unknown."""
        ...
