"""JOBSTREAM_PROVIDER_CONCURRENCY: `name=N,name=N`, checked at start-up."""

from __future__ import annotations

import pytest

from jobstream.settings import Settings, SettingsError, parse_provider_limits


def test_names_and_limits_are_read_with_spaces_and_trailing_commas_allowed() -> None:
    assert parse_provider_limits(" openai=16, vllm = 4 ,") == {"openai": 16, "vllm": 4}
    assert parse_provider_limits("") == {}


def test_the_default_limits_openai_and_leaves_the_simulator_free() -> None:
    assert Settings().provider_limits == {"openai": 16}


@pytest.mark.parametrize(
    ("raw", "complaint"),
    [
        ("openai", "expected name=N"),
        ("=3", "expected name=N"),
        ("openai=many", "expected a whole number"),
        ("openai=0", "at least 1"),
        ("openai=2,openai=3", "named twice"),
    ],
)
def test_a_bad_value_stops_start_up_with_the_variable_named(raw: str, complaint: str) -> None:
    with pytest.raises(SettingsError, match=complaint) as caught:
        Settings.from_env({"JOBSTREAM_PROVIDER_CONCURRENCY": raw})
    assert "JOBSTREAM_PROVIDER_CONCURRENCY" in str(caught.value)
