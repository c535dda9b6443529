from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import pytest

from jobstream.errors import ProviderError
from jobstream.prices import Price
from jobstream.usage import Usage
from jobstream.worker.providers.base import ProviderRequest, StreamItem, TextDelta
from jobstream.worker.providers.simulated import SimulatedProvider, token_text
from tests.support.simulated_text import expected_text

# The first tokens the words pattern makes for this file's prompt.
WORDS = [token_text("alpha beta gamma", "words", i) for i in range(2)]


class RecordedSleeps:
    """Stands in for asyncio.sleep and the clock: remembers each pause instead of waiting it
    out, and moves a virtual clock by the pause plus `late` (a busy loop wakes sleepers late)."""

    def __init__(self, late: float = 0.0) -> None:
        self.calls: list[float] = []
        self.now = 0.0
        self._late = late

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
        self.now += seconds + self._late

    def clock(self) -> float:
        return self.now


def paced(sleeps: RecordedSleeps, **kwargs: Any) -> SimulatedProvider:
    return SimulatedProvider(sleep=sleeps, clock=sleeps.clock, **kwargs)


def request(
    simulate: dict[str, Any], *, attempt: int = 1, max_tokens: int = 512
) -> ProviderRequest:
    return ProviderRequest(
        prompt="alpha beta gamma",
        model=None,
        max_tokens=max_tokens,
        attempt=attempt,
        simulate=simulate,
    )


def instant() -> SimulatedProvider:
    """The provider with its pauses recorded rather than waited out: the unit tier never sleeps."""
    return paced(RecordedSleeps())


async def collect(provider: SimulatedProvider, req: ProviderRequest) -> list[StreamItem]:
    return [item async for item in provider.stream(req)]


def text_of(items: list[StreamItem]) -> str:
    return "".join(i.text for i in items if isinstance(i, TextDelta))


async def test_words_pattern_makes_one_word_a_token_and_ends_with_usage() -> None:
    items = await collect(instant(), request({"tokens": 5, "tokens_per_second": 0}))
    assert text_of(items) == expected_text("alpha beta gamma", 5)
    assert len(text_of(items).split()) == 5
    assert items[-1] == Usage(
        input_tokens=3, output_tokens=5, cost_usd=Decimal("0.000010"), cost_known=True
    )


async def test_count_pattern_numbers_each_token_from_zero() -> None:
    req = request({"tokens": 4, "pattern": "count", "tokens_per_second": 0})
    items = await collect(instant(), req)
    assert [i.text for i in items if isinstance(i, TextDelta)] == ["0 ", "1 ", "2 ", "3 "]
    assert text_of(items) == expected_text("ignored", 4, "count")


async def test_tokens_default_to_max_tokens_and_never_exceed_it() -> None:
    provider = paced(RecordedSleeps())
    by_default = await collect(provider, request({}, max_tokens=7))
    capped = await collect(provider, request({"tokens": 100}, max_tokens=3))
    assert sum(isinstance(i, TextDelta) for i in by_default) == 7
    assert sum(isinstance(i, TextDelta) for i in capped) == 3


async def test_rate_and_first_token_delay_set_the_pauses() -> None:
    sleeps = RecordedSleeps()
    simulate = {"tokens": 3, "tokens_per_second": 4, "first_token_delay_s": 0.5}
    await collect(paced(sleeps), request(simulate))
    assert sleeps.calls == [0.5, 0.25, 0.25]


async def test_a_stream_woken_late_keeps_its_rate_by_yielding_what_is_due_at_once() -> None:
    # Every pause ends 0.15 s late: 10 tokens/s must still take 0.9 s from the first token to
    # the last, not 9 x 0.25 s. A token already due is yielded without a pause.
    sleeps = RecordedSleeps(late=0.15)
    simulate = {"tokens": 10, "tokens_per_second": 10, "pattern": "count", "first_token_delay_s": 0}
    items = await collect(paced(sleeps), request(simulate))
    assert text_of(items) == "".join(f"{i} " for i in range(10))
    assert sleeps.now == pytest.approx(0.9 + 0.15)
    assert len(sleeps.calls) == 5  # after tokens 1, 3, 5, 7 and 9; 2, 4, 6 and 8 were due


async def test_output_is_deterministic() -> None:
    simulate = {"tokens": 20, "tokens_per_second": 0}
    first = await collect(instant(), request(simulate))
    second = await collect(instant(), request(simulate))
    assert first == second
    assert text_of(first) == expected_text("alpha beta gamma", 20)


@pytest.mark.parametrize(
    ("kind", "error_kind", "status"),
    [
        ("transient", "transient", 500),
        ("rate_limited", "rate_limited", 429),
        ("permanent", "permanent", 400),
        ("drop", "unknown", None),
    ],
)
async def test_a_fault_fails_its_attempt_after_the_given_tokens(
    kind: str, error_kind: str, status: int | None
) -> None:
    fault = {"attempt": 2, "after_tokens": 3, "kind": kind}
    simulate = {"tokens": 10, "tokens_per_second": 0, "faults": [fault]}
    received: list[StreamItem] = []
    with pytest.raises(ProviderError) as caught:
        async for item in instant().stream(request(simulate, attempt=2)):
            received.append(item)
    assert caught.value.kind == error_kind
    assert caught.value.status_code == status
    assert text_of(received) == expected_text("alpha beta gamma", 3)
    # Other attempts are unaffected.
    clean = await collect(instant(), request(simulate, attempt=1))
    assert isinstance(clean[-1], Usage)


async def test_rate_limited_carries_retry_after_default_one_second() -> None:
    for fault, expected in [
        ({"attempt": 1, "after_tokens": 0, "kind": "rate_limited"}, 1.0),
        ({"attempt": 1, "after_tokens": 0, "kind": "rate_limited", "retry_after_s": 7}, 7.0),
    ]:
        with pytest.raises(ProviderError) as caught:
            await collect(instant(), request({"faults": [fault], "tokens": 1}))
        assert caught.value.retry_after_s == expected


async def test_a_fault_past_the_last_token_breaks_the_stream_before_its_usage() -> None:
    fault = {"attempt": 1, "after_tokens": 99, "kind": "drop"}
    received: list[StreamItem] = []
    with pytest.raises(ProviderError):
        async for item in instant().stream(
            request({"tokens": 2, "tokens_per_second": 0, "faults": [fault]})
        ):
            received.append(item)
    assert received == [TextDelta(WORDS[0]), TextDelta(WORDS[1])]


async def test_timeout_fault_hangs_until_the_consumer_times_out() -> None:
    fault = {"attempt": 1, "after_tokens": 1, "kind": "timeout"}
    simulate = {"tokens": 5, "tokens_per_second": 0, "first_token_delay_s": 0, "faults": [fault]}
    received: list[StreamItem] = []
    # The runner meets a hang the same way: its per-attempt timeout cancels the stream.
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            async for item in instant().stream(request(simulate)):
                received.append(item)
    assert received == [TextDelta(WORDS[0])]


@pytest.mark.parametrize(
    "simulate",
    [
        {"tokens": -1},
        {"tokens": 1.5},
        {"tokens": True},
        {"pattern": "poems"},
        {"faults": [{"kind": "meteor"}]},
        {"faults": "transient"},
    ],
)
async def test_invalid_simulation_is_a_permanent_error(simulate: dict[str, Any]) -> None:
    with pytest.raises(ProviderError) as caught:
        await collect(instant(), request(simulate))
    assert caught.value.kind == "permanent"
    assert caught.value.status_code == 400


def test_the_catalogues_price_is_two_dollars_a_million_output_tokens() -> None:
    assert instant().estimate_cost(request({}), 10) == Decimal("0.000020")


async def test_the_price_is_the_servers_never_the_jobs() -> None:
    # Regression (issue 9, defect 10): a job set its own price with simulate.cost_per_token.
    # The server refuses that field now; a job stored before still has it, and it is ignored.
    zero = Decimal(0)
    provider = paced(RecordedSleeps(), price=Price(zero, Decimal("0.15"), zero, zero, "operator"))
    asks_free = request({"tokens": 4, "tokens_per_second": 0, "cost_per_token": 0})
    assert provider.estimate_cost(asks_free, 4) == Decimal("0.0000006")
    items = await collect(provider, asks_free)
    assert isinstance(items[-1], Usage) and items[-1].cost_usd == Decimal("0.0000006")


def test_words_read_as_sentences_vary_by_prompt_and_never_echo_it() -> None:
    # Regression (issue 13): "Explain leases Explain leases ..." made the demo look broken.
    first = expected_text("Explain leases", 40)
    assert first == expected_text("Explain leases", 40)  # deterministic
    assert "Explain" not in first and first[0].isupper() and "." in first
    texts = {expected_text(f"prompt {i}", 40) for i in range(20)}
    assert len(texts) > 5  # different prompts read differently
    assert expected_text("Explain leases", 3, "count") == "0 1 2 "  # unchanged
