"""Signed events_url tokens: one job, read-only, until they expire or their key generation ends."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from jobstream.server.access_log import redact
from jobstream.server.stream_tokens import LEGACY, StreamTokens, accepts

JOB, OTHER = "3f0c7a52-0000-4000-8000-000000000001", "3f0c7a52-0000-4000-8000-000000000002"


def test_a_token_is_valid_for_its_job_until_it_expires() -> None:
    now = [1000.0]
    tokens = StreamTokens("secret", 60, now=lambda: now[0])
    token = tokens.issue(JOB, 3)
    assert tokens.generation(JOB, token) == 3
    assert tokens.generation(OTHER, token) is None
    assert tokens.at(3).issue(JOB) == token  # what a request's answers carry
    now[0] += 61
    assert tokens.generation(JOB, token) is None


def test_forged_and_malformed_tokens_are_refused() -> None:
    tokens = StreamTokens("secret", 60)
    token = tokens.issue(JOB, 2)
    _, expires, signature = token.split(".")
    assert StreamTokens("other key", 60).generation(JOB, token) is None
    forged = (
        f"2.{int(expires) + 1000}.{signature}",  # extended by hand
        f"3.{expires}.{signature}",  # moved to a later generation by hand
        f"{expires}.{signature}",  # passed off as a token of before generations
        f"0.{expires}.{signature}",
    )
    malformed = (
        "", ".", "..", "abc", f"{expires}.", f"2.{expires}.", f"-1.{signature}",
        f"2.-1.{signature}", "9" * 40 + "." + signature, f"{'9' * 40}.{expires}.{signature}",
        f"2.{expires}.{signature}.x", f"²{token}",
    )  # fmt: skip
    for bad in (*forged, *malformed):
        assert tokens.generation(JOB, bad) is None, bad


def test_a_token_of_before_generations_is_read_as_legacy() -> None:
    """The format before generations, `<expires>.<signature>` over `jobstream-events:<job>:
    <expires>`, as servers before the upgrade issued it."""
    tokens = StreamTokens("secret", 60)
    expires = 2_000_000_000
    message = f"jobstream-events:{JOB}:{expires}".encode()
    digest = hmac.new(b"secret", message, hashlib.sha256).digest()
    signature = base64.urlsafe_b64encode(digest).decode().rstrip("=")
    assert tokens.generation(JOB, f"{expires}.{signature}") == LEGACY
    assert tokens.generation(OTHER, f"{expires}.{signature}") is None


def test_which_generations_a_tenant_accepts() -> None:
    assert accepts(4, 4, previous_valid=False)
    assert accepts(3, 4, previous_valid=True)  # the rotated-out key's grace runs
    assert not accepts(3, 4, previous_valid=False)  # it ended, or the key was revoked
    assert not accepts(2, 4, previous_valid=True)  # only the one before the current
    assert not accepts(5, 4, previous_valid=True)  # none from the future
    assert accepts(LEGACY, 1, previous_valid=False)
    assert not accepts(LEGACY, 2, previous_valid=True)  # never in a grace: refused once rotated


def test_without_a_secret_each_process_signs_with_its_own_random_key() -> None:
    assert StreamTokens("", 60).generation(JOB, StreamTokens("", 60).issue(JOB, 1)) is None


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
