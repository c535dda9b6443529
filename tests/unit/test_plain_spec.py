"""The lean path of job validation (job_body.plain_spec) accepts only what the field-by-field
checks accept, and makes the same JobSpec of it; everything else it leaves to them."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jobstream.jobspec import JobSpec
from jobstream.server import job_body
from jobstream.server.problems import Problem
from jobstream.server.simulated_rules import SimulatedRules

ON, OFF = SimulatedRules(enabled=True, max_s=60), SimulatedRules(enabled=False, max_s=60)
RULES = st.sampled_from([ON, ON, ON, OFF])
DEFAULT_PROVIDER = st.sampled_from(["simulated", "simulated", "openai", "other"])

# Wrong types and values a JSON body can hold. The values drawn are mostly right, so that many
# bodies pass and the two paths' JobSpecs are compared.
WRONG: list[Any] = [None, True, False, "", "\x00", [], {}, 0.5, -1, 1e6]
ODD = st.sampled_from(WRONG)


def around(lo: float, *bounds: float) -> st.SearchStrategy[Any]:
    """Inside [lo, max(bounds)] mostly; at, just past and between the bounds; the wrong type."""
    edges = sorted({v for b in (lo, *bounds) for v in (b - 1, b, b + 1)} | {b / 2 for b in bounds})
    inside = [v for v in (lo, *bounds) if isinstance(v, int)]
    return st.sampled_from(inside * 8 + edges + WRONG)


TEXT = st.one_of(st.sampled_from(["hello", "x", "gpt-x", "x" * 201, *WRONG]), st.text(max_size=4))
PROVIDER = st.sampled_from(["simulated"] * 8 + ["openai"] * 4 + ["other", *WRONG])
SIMULATE = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "tokens_per_second": around(0, 40, 100_000),
            "tokens": around(0, 1, 1_000_000),
            "first_token_delay_s": around(0, 30, 3600),
            "pattern": st.sampled_from(["words", "count", "other", *WRONG]),
        },
    ),
    st.dictionaries(
        st.sampled_from(["tokens", "faults", "cost_per_token", "other"]), around(1), max_size=2
    ),
    ODD,
)
METADATA = st.one_of(
    st.dictionaries(st.text(max_size=3), st.one_of(st.text(max_size=3), around(0)), max_size=3),
    st.just({"big": "x" * 5000}),
    st.just({"nul": "\x00"}),
    ODD,
)
FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "provider": PROVIDER,
    "model": TEXT,
    "max_tokens": around(1, 512, 32_768),
    "priority": around(-10, 0, 10),
    "max_attempts": around(1, 3, 10),
    "retry_unknown": st.sampled_from([True, False] * 4 + WRONG),
    "timeout_s": around(1, 60, 61, 3600),
    "metadata": METADATA,
    "simulate": SIMULATE,
}
BODIES = st.one_of(
    st.fixed_dictionaries({"prompt": st.sampled_from(["hello", "x"])}, optional=FIELDS),
    st.fixed_dictionaries({"prompt": TEXT}, optional=FIELDS),
    # Now and then a field the lean path leaves to the checks.
    st.fixed_dictionaries(
        {"prompt": TEXT},
        optional={"webhook_url": TEXT, "delay_s": around(0), "messages": ODD, "unknown": TEXT},
    ),
)


def checked(body: dict[str, Any], rules: SimulatedRules, provider: str) -> object:
    try:
        return job_body.checked_spec(body, default_provider=provider, simulated=rules)
    except Problem as problem:
        return problem


@settings(max_examples=400, deadline=None)
@given(BODIES, RULES, DEFAULT_PROVIDER)
def test_the_lean_path_answers_as_the_field_by_field_checks(
    body: dict[str, Any], rules: SimulatedRules, provider: str
) -> None:
    lean = job_body.plain_spec(body, provider, rules)
    if lean is not None:
        slow = checked(body, rules, provider)
        assert isinstance(slow, JobSpec)
        assert lean == slow
        assert lean.request_hash() == slow.request_hash()


def test_a_plain_job_takes_the_lean_path() -> None:
    simulate = {"tokens": 1, "tokens_per_second": 0, "first_token_delay_s": 0}
    body = {"prompt": "p", "provider": "simulated", "metadata": {"a": [1]}, "simulate": simulate}
    lean = job_body.plain_spec(body, "simulated", ON)
    assert lean is not None
    assert lean == job_body.checked_spec(body, default_provider="simulated", simulated=ON)
