"""Signed, short-lived tokens that let a browser's EventSource read one job's events.

EventSource cannot send headers, so the job's `events_url` carries the credential in its query
string (docs/design.md). A token names one job and an expiry, signed with HMAC-SHA256; it grants
nothing but reading that job's events until it expires, and only while the key generation it was
issued under is still good (`accepts`): a key's rotation or revocation ends the tokens issued
under it without a list of tokens to revoke.

    <generation>.<expires>.<signature>   signature over "jobstream-events.v2:<job>:<gen>:<exp>"
    <expires>.<signature>                before generations (LEGACY): good while the tenant's
                                         key is still at generation 1
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


LEGACY = 0  # the generation of a token issued before tokens carried one (generations start at 1)
_MAX_DIGITS = 12  # an expiry in unix seconds, a generation: longer is not one of ours


def accepts(generation: int, current: int, *, previous_valid: bool) -> bool:
    """Is a token issued under key `generation` still good, the tenant's key being at `current`?

    The current generation's tokens are; the one before's while the rotated-out key's grace runs
    (`previous_valid`: tenants.previous_key_until is in the future), so a rotation breaks no open
    page during the grace. A revocation leaves no previous key: every older token dies at once.
    A LEGACY token counts as generation 1 while that is the current one, and never in a grace:
    it was issued before rotations existed, and expires within JOBSTREAM_STREAM_TOKEN_TTL_S.
    """
    if generation == LEGACY:
        return current == 1
    return generation == current or (previous_valid and generation == current - 1)


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

    def issue(self, job_id: str, generation: int) -> str:
        """A token for `job_id`, under the tenant's key `generation` (the key of the request
        that is answered with it)."""
        expires = int(self._now()) + self._ttl_s
        return f"{generation}.{expires}.{self._sign(job_id, generation, expires)}"

    def at(self, generation: int) -> GenerationTokens:
        """This key's tokens under one key generation: what a request's answers are signed with."""
        return GenerationTokens(self, generation)

    def generation(self, job_id: str, token: str) -> int | None:
        """The key generation a genuine, unexpired token for `job_id` was issued under (LEGACY
        for one of the format before generations); None for any other token. Whether that
        generation is still good is the tenant's to say (`accepts`)."""
        # ASCII only: '²'.isdigit() is true but int() refuses it, and compare_digest refuses
        # non-ASCII str; both were 500s for anyone holding a URL.
        if not token.isascii():
            return None
        parts = token.split(".")  # base64url has no '.': a signature never splits
        if len(parts) == 2:
            generation, (expires, signature) = LEGACY, parts
        elif len(parts) == 3 and _number(parts[0]) and int(parts[0]) != LEGACY:
            generation, expires, signature = int(parts[0]), parts[1], parts[2]
        else:
            return None
        if not _number(expires) or int(expires) < self._now():
            return None
        expected = (
            self._encode(f"jobstream-events:{job_id}:{int(expires)}")  # as it was signed then
            if generation == LEGACY
            else self._sign(job_id, generation, int(expires))
        )
        return generation if hmac.compare_digest(signature, expected) else None

    def _sign(self, job_id: str, generation: int, expires: int) -> str:
        # The purpose prefix keeps this MAC from ever being mistaken for another use of the key,
        # a legacy token's message included (its prefix has no ".v2").
        return self._encode(f"jobstream-events.v2:{job_id}:{generation}:{expires}")

    def _encode(self, message: str) -> str:
        return base64.urlsafe_b64encode(self.mac(message.encode())).decode().rstrip("=")

    def mac(self, message: bytes) -> bytes:
        """HMAC-SHA256 of `message` under this server's key."""
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()


class GenerationTokens:
    """StreamTokens bound to one key generation: issues what representation.links puts in a
    job's events_url."""

    __slots__ = ("_generation", "_tokens")

    def __init__(self, tokens: StreamTokens, generation: int) -> None:
        self._tokens = tokens
        self._generation = generation

    def issue(self, job_id: str) -> str:
        return self._tokens.issue(job_id, self._generation)


def _number(text: str) -> bool:
    return text.isdigit() and len(text) <= _MAX_DIGITS
