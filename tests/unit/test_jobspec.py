"""The request hash is stored with every job: it must not move when JobSpec gains fields."""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from datetime import UTC, datetime

import orjson

from jobstream.jobspec import DEFAULT_TIMEOUT_S, AttemptSpec, JobSpec


def version_1_hash(spec: JobSpec) -> str:
    """How version 1 hashed a request: every field it had, keys sorted."""
    since = ("run_at", "delay_s", "messages", "instructions", "temperature", "top_p", "retain_s",
             "job", "input", "max_cost_usd", "invalid_output_retries")  # fmt: skip
    fields = {k: v for k, v in asdict(spec).items() if k not in since}
    return hashlib.sha256(orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)).hexdigest()


def test_a_request_made_before_the_upgrade_still_matches_its_job() -> None:
    spec = JobSpec(prompt="p", provider="simulated", metadata={"a": {"b": [1]}}, simulate={"x": 1})
    assert spec.request_hash() == version_1_hash(spec)


def test_the_new_fields_count_when_set() -> None:
    plain = JobSpec(prompt="p", provider="simulated")
    later = JobSpec(prompt="p", provider="simulated", run_at=datetime(2030, 1, 1, tzinfo=UTC))
    delayed = JobSpec(prompt="p", provider="simulated", delay_s=5.0)
    assert len({plain.request_hash(), later.request_hash(), delayed.request_hash()}) == 3
    talked = JobSpec(prompt="p", provider="simulated", messages=[{"role": "user", "content": "p"}])
    told = JobSpec(prompt="p", provider="simulated", instructions="be brief", top_p=0.5)
    assert len({plain.request_hash(), talked.request_hash(), told.request_hash()}) == 3


def test_an_attempt_may_run_for_minutes_by_default() -> None:
    # Regression (issue 13): 90 s cut reasoning models off as an unknown outcome, no retry.
    spec = JobSpec(prompt="p", provider="openai")
    assert spec.timeout_s == DEFAULT_TIMEOUT_S >= 20 * 60
    assert AttemptSpec.from_payload({"prompt": "p"}).timeout_s == DEFAULT_TIMEOUT_S
