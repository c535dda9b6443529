"""Signed, short-lived tokens that let a browser's EventSource read one job's events.

EventSource cannot send headers, so the job's `events_url` carries the credential in its query
string (DESIGN.md §6). A token names one job and an expiry, signed with HMAC-SHA256; it grants
nothing but reading that job's events until it expires.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable

_BLOCK = hashlib.sha256().block_size  # 64 bytes: HMAC pads or hashes its key to this
# RFC 2104's inner and outer pads, as translation tables of the padded key's bytes.
_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))


class StreamTokens:
    def __init__(self, secret: str, ttl_s: int, *, now: Callable[[], float] = time.time) -> None:
        # No configured secret: a random one per process, so tokens are valid on this server
        # only (fine for a single server; replicas need JOBSTREAM_SECRET_KEY).
        key = secret.encode() if secret else secrets.token_bytes(32)
        # HMAC-SHA256 (RFC 2104) keyed once: the hashes of the padded key, copied for each token.
        # hmac.new per token hashed the key again, and an HMAC object's copy() (OpenSSL's
        # HMAC_CTX) took 1.9 µs a token against 0.7 for two hashlib copies; a batch create
        # issues a thousand. tests/unit/test_stream_tokens.py holds it to hmac's digest.
        if len(key) > _BLOCK:
            key = hashlib.sha256(key).digest()
        key = key.ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha256(key.translate(_IPAD))
        self._outer = hashlib.sha256(key.translate(_OPAD))
        self._ttl_s = ttl_s
        self._now = now

    def issue(self, job_id: str) -> str:
        expires = int(self._now()) + self._ttl_s
        return f"{expires}.{self._sign(job_id, expires)}"

    def valid(self, job_id: str, token: str) -> bool:
        # ASCII only: '²'.isdigit() is true but int() refuses it, and compare_digest refuses
        # non-ASCII str; both were 500s for anyone holding a URL.
        if not token.isascii():
            return False
        expires, _, signature = token.partition(".")
        if not expires.isdigit() or len(expires) > 12:
            return False
        if int(expires) < self._now():
            return False
        return hmac.compare_digest(signature, self._sign(job_id, int(expires)))

    def _sign(self, job_id: str, expires: int) -> str:
        # The purpose prefix keeps this MAC from ever being mistaken for another use of the key.
        return (
            base64.urlsafe_b64encode(self.mac(f"jobstream-events:{job_id}:{expires}".encode()))
            .decode()
            .rstrip("=")
        )

    def mac(self, message: bytes) -> bytes:
        """HMAC-SHA256 of `message` under this server's key."""
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()
