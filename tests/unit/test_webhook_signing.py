"""Signatures match the Standard Webhooks reference, and the SSRF guard's address rules."""

from __future__ import annotations

import ipaddress

import pytest

from worker import signatures, webhook_targets


def test_the_signature_matches_the_standard_webhooks_test_vector() -> None:
    signature = signatures.sign(
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1614265330,
        b'{"test": 2432232314}',
    )
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_a_generated_secret_is_in_the_whsec_form_and_signs() -> None:
    secret = signatures.new_secret()
    assert secret.startswith("whsec_")
    assert signatures.sign(secret, "1", 0, b"{}").startswith("v1,")


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.0.10", "private"),
        ("fd00::1", "private"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "private"),
        ("93.184.216.34", None),
        ("2606:4700::1111", None),
    ],
)
def test_forbidden_addresses(address: str, reason: str | None) -> None:
    assert webhook_targets.forbidden_reason(ipaddress.ip_address(address)) == reason


async def test_a_url_naming_a_loopback_address_is_refused() -> None:
    refusal = await webhook_targets.refusal("http://127.0.0.1:9/hook")
    assert refusal is not None and "loopback" in refusal


async def test_a_public_literal_address_is_allowed() -> None:
    assert await webhook_targets.refusal("https://93.184.216.34/hook") is None
