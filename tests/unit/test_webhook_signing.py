"""Signatures match the Standard Webhooks reference (the SSRF guard: test_webhook_targets.py)."""

from __future__ import annotations

from jobstream.worker import signatures


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
