"""Signed events_url tokens: one job, read-only, until they expire."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from jobstream.server.access_log import redact
from jobstream.server.stream_tokens import StreamTokens

JOB, OTHER = "3f0c7a52-0000-4000-8000-000000000001", "3f0c7a52-0000-4000-8000-000000000002"


def test_a_token_is_valid_for_its_job_until_it_expires() -> None:
    now = [1000.0]
    tokens = StreamTokens("secret", 60, now=lambda: now[0])
    token = tokens.issue(JOB)
    assert tokens.valid(JOB, token)
    assert not tokens.valid(OTHER, token)
    now[0] += 61
    assert not tokens.valid(JOB, token)


def test_forged_and_malformed_tokens_are_refused() -> None:
    tokens = StreamTokens("secret", 60)
    token = tokens.issue(JOB)
    expires, signature = token.split(".")
    assert not StreamTokens("other key", 60).valid(JOB, token)
    assert not tokens.valid(JOB, f"{int(expires) + 1000}.{signature}")  # extended by hand
    for bad in ("", ".", "abc", f"{expires}.", f"-1.{signature}", "9" * 40 + "." + signature):
        assert not tokens.valid(JOB, bad)


def test_without_a_secret_each_process_signs_with_its_own_random_key() -> None:
    assert not StreamTokens("", 60).valid(JOB, StreamTokens("", 60).issue(JOB))


def test_the_access_log_never_shows_a_token() -> None:
    line = '127.0.0.1 - "GET /api/jobs/x/events?after=3&token=123.abc_-Z HTTP/1.1" 200'
    assert (
        redact(line) == '127.0.0.1 - "GET /api/jobs/x/events?after=3&token=[redacted] HTTP/1.1" 200'
    )


@pytest.mark.parametrize("secret", ["k", "x" * 64, "a longer key than a block of sha256 " * 3])
def test_the_mac_is_hmac_sha256(secret: str) -> None:
    tokens = StreamTokens(secret, 60)
    for message in (b"", b"jobstream-events:job:1", b"m" * 200):
        expected = hmac.new(secret.encode(), message, hashlib.sha256).digest()
        assert tokens.mac(message) == expected
