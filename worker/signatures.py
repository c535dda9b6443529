"""Standard Webhooks signatures (https://www.standardwebhooks.com): what receivers verify."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

_PREFIX = "whsec_"


def new_secret() -> str:
    """A random secret in the Standard Webhooks form, which its libraries accept as is."""
    return _PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def _key(secret: str) -> bytes:
    # `whsec_<base64>` carries its key bytes base64-encoded; any other text is the key itself.
    if secret.startswith(_PREFIX):
        return base64.b64decode(secret.removeprefix(_PREFIX))
    return secret.encode()


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header: `v1,` and the base64 HMAC-SHA256 of `id.timestamp.body`."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()
