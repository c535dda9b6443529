"""The simulated provider: deterministic tokens at a set rate, with injectable faults.

It is the default for `make run` and the tests, so it must behave like a real provider where it
matters to the runner: output arrives over time, a failure can happen mid-stream, a hang lasts
until the attempt's timeout, and cancelling the consumer stops the generation. The job's
`simulate` object (docs/design.md, "The simulated provider") drives it; its price is the server's
(the price catalogue's `simulated` entry, whatever model the job names), never the job's: a
`cost_per_token` stored by a job created before the server refused it is ignored.
"""

from __future__ import annotations

import asyncio
import functools
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, Literal, TypeVar, cast, get_args

import orjson

from jobstream import prices
from jobstream.errors import ProviderError
from jobstream.prices import Price
from jobstream.usage import Usage
from jobstream.worker.providers.base import Prompt, ProviderRequest, StreamItem, TextDelta
from jobstream.worker.providers.json_sample import sample
from jobstream.worker.providers.pacer import Pacer

FaultKind = Literal["transient", "rate_limited", "permanent", "timeout", "drop"]
Pattern = Literal["words", "count"]
# Read once: typing.get_args per parse was a tenth of the simulator's cost per attempt.
PATTERNS: Final = get_args(Pattern)
FAULT_KINDS: Final = get_args(FaultKind)
# The model the price catalogue prices the simulator's every call as.
SIMULATED_MODEL: Final = "simulated"

DEFAULT_TOKENS_PER_SECOND: Final = 40.0
DEFAULT_FIRST_TOKEN_DELAY_S: Final = 0.2
Num = TypeVar("Num", int, float)

# The "words" pattern's text: readable sentences, so a demo looks like an answer (echoing the
# prompt looked broken). The prompt picks where it starts, so different prompts read differently
# and the same prompt always reads the same.
SENTENCES: Final = (
    "A job outlives the request that created it, so a closed tab cancels nothing.",
    "Each attempt holds a lease and renews it while the model is still writing.",
    "If a worker dies, its lease runs out and another worker takes the job over.",
    "Every chunk of text is written to an ordered log before anyone is told about it.",
    "A reader that reconnects names the last event it saw and misses nothing after it.",
    "When an attempt fails, a reset tells every reader to drop the text it had so far.",
    "Retries wait a little longer each time, with some jitter so they do not arrive together.",
    "An answer whose outcome is unknown is not retried unless the job allows it.",
    "PostgreSQL decides who runs what; notifications only make the workers look sooner.",
    "The tenant pays once, for the accepted result, and never for a crash of ours.",
    "Long generations are fine: the idle timeout notices a stalled stream long before the "
    "attempt's own limit.",
    "A cancelled job stays cancelled, whatever a slow worker tries to write afterwards.",
    "Webhooks leave through an outbox, written in the same transaction that ends the job.",
    "Any server replica can serve any reader, because the log lives in the database.",
    "This text comes from the simulated provider: set provider to openai for a real model.",
)
_WORDS: Final = tuple(" ".join(SENTENCES).split())
# Where each sentence starts in _WORDS: a prompt's text starts at the top of a sentence.
_SENTENCE_STARTS: Final = tuple(
    sum(len(sentence.split()) for sentence in SENTENCES[:i]) for i in range(len(SENTENCES))
)


class InvalidSimulation(ValueError):
    """The job's `simulate` object is malformed."""


@dataclass(frozen=True)
class Fault:
    attempt: int
    after_tokens: int
    kind: FaultKind
    retry_after_s: float


@dataclass(frozen=True)
class Simulation:
    """A job's `simulate` object, parsed and checked."""

    tokens_per_second: float
    tokens: int
    pattern: Pattern
    first_token_delay_s: float
    faults: tuple[Fault, ...]

    @classmethod
    def parse(cls, raw: Mapping[str, Any], max_tokens: int) -> Simulation:
        # Capped at max_tokens: that is the job's output limit, and no real provider exceeds it.
        tokens = min(_number(raw, "tokens", max_tokens, int), max_tokens)
        pattern = raw.get("pattern", "words")
        if pattern not in PATTERNS:
            raise InvalidSimulation(f"simulate.pattern must be 'words' or 'count', not {pattern!r}")
        faults = raw.get("faults", [])
        if not isinstance(faults, list):
            raise InvalidSimulation("simulate.faults must be a list")
        return cls(
            tokens_per_second=_number(raw, "tokens_per_second", DEFAULT_TOKENS_PER_SECOND, float),
            tokens=tokens,
            pattern=pattern,
            first_token_delay_s=_number(
                raw, "first_token_delay_s", DEFAULT_FIRST_TOKEN_DELAY_S, float
            ),
            faults=tuple(map(_fault, faults)),
        )

    @property
    def run_s(self) -> float:
        """How long an attempt without faults takes."""
        return run_seconds(self.tokens, self.tokens_per_second, self.first_token_delay_s)

    def fault_for(self, attempt: int) -> Fault | None:
        """The first fault listed for this attempt, if any."""
        return next((f for f in self.faults if f.attempt == attempt), None)


def run_seconds(tokens: int, tokens_per_second: float, first_token_delay_s: float) -> float:
    """How long an attempt of `tokens` without faults takes: the first-token delay, then a
    pause between each two tokens (none at 0 tokens a second)."""
    pauses = max(tokens - 1, 0) / tokens_per_second if tokens_per_second else 0
    return first_token_delay_s + pauses


def _number(raw: Mapping[str, Any], key: str, default: Num, kind: type[Num]) -> Num:
    value = raw.get(key, default)
    # bool is an int to Python, but `"tokens": true` is a mistake, not a count. A tuple, not
    # `int | float`: that builds a union each call (parsed once per job a batch create checks).
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidSimulation(f"simulate.{key} must be a number")
    if kind is int and value != int(value):
        raise InvalidSimulation(f"simulate.{key} must be a whole number")
    if value < 0:
        raise InvalidSimulation(f"simulate.{key} must not be negative")
    return kind(value)


def _fault(raw: Any) -> Fault:
    if not isinstance(raw, Mapping):
        raise InvalidSimulation("each simulate.faults entry must be an object")
    kind = raw.get("kind")
    if kind not in FAULT_KINDS:
        raise InvalidSimulation(f"unknown fault kind {kind!r}")
    return Fault(
        attempt=_number(raw, "attempt", 1, int),
        after_tokens=_number(raw, "after_tokens", 0, int),
        kind=cast(FaultKind, kind),  # checked just above
        retry_after_s=_number(raw, "retry_after_s", 1.0, float),
    )


def token_text(prompt: str, pattern: Pattern, index: int) -> str:
    """The index-th token (from 0). "count" makes gaps and duplicates visible in the output."""
    if pattern == "count":
        return f"{index} "
    return f"{_WORDS[(_start(prompt) + index) % len(_WORDS)]} "


@functools.lru_cache(maxsize=1024)
def _start(prompt: str) -> int:
    """Where the prompt's text starts in _WORDS (cached: asked once per token; a string caches
    its own hash, so a long prompt is hashed once)."""
    return _SENTENCE_STARTS[zlib.crc32(prompt.encode()) % len(_SENTENCE_STARTS)]


def _fault_error(fault: Fault, produced: int) -> ProviderError:
    where = f"after {produced} tokens"
    # An HTTP error before the first token is the provider refusing the request: it bills nothing.
    refused = produced == 0
    match fault.kind:
        case "transient":
            return ProviderError(
                "transient", f"simulated HTTP 500 {where}", status_code=500, refused=refused
            )
        case "rate_limited":
            return ProviderError(
                "rate_limited",
                f"simulated HTTP 429 {where}",
                status_code=429,
                retry_after_s=fault.retry_after_s,
                refused=refused,
            )
        case "permanent":
            return ProviderError(
                "permanent", f"simulated HTTP 400 {where}", status_code=400, refused=refused
            )
        case "drop":
            return ProviderError("unknown", f"simulated connection lost mid-stream {where}")
        case "timeout":
            raise AssertionError("a timeout fault hangs (see stream); it raises nothing")


def _structured(request: ProviderRequest) -> list[str]:
    """The structured answer to `request`, in pieces of about four characters (a token)."""
    assert request.json_schema is not None
    seed = zlib.crc32(request.chat()[-1]["content"].encode())
    text = orjson.dumps(sample(request.json_schema["schema"], seed)).decode()
    return [text[i : i + 4] for i in range(0, len(text), 4)]


# A stream behind its schedule yields the tokens already due without pausing, as a real
# provider's buffered bytes arrive together; every this many, it still lets the loop run.
CATCH_UP_TOKENS = 16


class SimulatedProvider:
    """Deterministic: the same request always yields the same items (timing aside)."""

    name = "simulated"

    def __init__(
        self,
        *,
        price: Price | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        # The simulator is one model, whatever the job names: the catalogue's `simulated` entry.
        self._price = price or prices.load().price_of(self.name, SIMULATED_MODEL)
        # Injected so unit tests can count the pauses instead of sitting through them; else
        # every stream of this provider sleeps on one timer a tick (worker/providers/pacer.py),
        # on the event loop's clock (asyncio's is time.monotonic).
        self._sleep = sleep or Pacer().sleep
        self._clock = clock or time.monotonic

    async def stream(self, request: ProviderRequest) -> AsyncIterator[StreamItem]:
        try:
            sim = Simulation.parse(request.simulate, request.max_tokens)
        except InvalidSimulation as exc:
            # What a real API answers to a malformed request: a 400, not worth a retry.
            raise ProviderError(
                "permanent", str(exc), status_code=400, request_sent=True, refused=True
            ) from exc
        fault = sim.fault_for(request.attempt)
        request.send_mark.mark()  # the simulated request is "sent" as soon as it is valid
        # Structured output: JSON that fits the schema, the same for the same prompt, in pieces
        # of a few characters; cut off at max_tokens as a model at its limit is.
        pieces = _structured(request) if request.json_schema is not None else None
        tokens = sim.tokens if pieces is None else min(len(pieces), request.max_tokens)
        await self._pause(sim.first_token_delay_s)
        # A fault past the last token fires after all of them, before the usage: the stream
        # broke before its end marker.
        fault_at = min(fault.after_tokens, tokens) if fault else None
        interval = 1 / sim.tokens_per_second if sim.tokens_per_second > 0 else 0.0
        # Token i is due at i intervals after the first, whenever the loop gets to it: a real
        # provider generates at its own pace, and a worker short of CPU reads what piled up. A
        # pause after each token instead slowed the stream down with its reader (a worker
        # running 1,000 streams of 50 tokens/s produced 19,000 of the 50,000 tokens/s asked).
        clock = self._clock
        due = clock()
        for index in range(tokens + 1):
            if index == fault_at and fault is not None:
                if fault.kind == "timeout":
                    # Hang like a provider that stopped answering: only cancellation (the
                    # runner's per-attempt timeout, or a cancel) ends this.
                    await asyncio.get_running_loop().create_future()
                raise _fault_error(fault, index)
            if index == tokens:
                break
            if index > 0:
                due += interval
                wait = due - clock()
                if wait > 0:
                    await self._sleep(wait)  # not through _pause: a frame less per token
                elif interval == 0 or index % CATCH_UP_TOKENS == 0:
                    await asyncio.sleep(0)
            if pieces is not None:
                yield TextDelta(pieces[index])
            else:
                yield self._delta(request, sim.pattern, index)
        cut = pieces is not None and len(pieces) > request.max_tokens
        request.finish.reason = "length" if cut else "stop"
        input_tokens = len(request.prompt.split())
        yield Usage(
            input_tokens=input_tokens,
            output_tokens=tokens,
            cost_usd=self._price.cost(input_tokens, tokens),
            cost_known=True,
        )

    def _delta(self, request: ProviderRequest, pattern: Pattern, index: int) -> TextDelta:
        """The index-th token as it leaves the provider (a benchmark notes the time here)."""
        return TextDelta(token_text(request.prompt, pattern, index))

    async def _pause(self, seconds: float) -> None:
        # At 0 tokens/s still yield to the loop, so that a cancel can land between tokens.
        await (self._sleep(seconds) if seconds > 0 else asyncio.sleep(0))

    def price(self, request: Prompt) -> Price:
        return self._price

    def estimate_cost(self, request: Prompt, output_tokens: int) -> Decimal:
        return self._price.cost(len(request.prompt.split()), output_tokens)
