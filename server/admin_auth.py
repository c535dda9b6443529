"""Who may use /admin/api/*: an operator, never a tenant (docs/admin.md, "Access").

What it shows and does is every tenant's at once, so no tenant's key reaches it, whatever the
settings:

- JOBSTREAM_ADMIN_KEY set: `Authorization: Bearer <that key>` and nothing else (401), compared
  in constant time, from any address.
- Unset, API keys required (JOBSTREAM_REQUIRE_API_KEY): refused (401), as nothing would tell
  the operator from a tenant.
- Unset, keys off (`make run`): loopback clients only (127.0.0.0/8, ::1; 403 for any other
  address), and only without a credential: a key sent here is not an operator's (401).

The page at /admin/ loads without any of this; it asks for the key and sends it with each call.
"""

from __future__ import annotations

import hmac
import ipaddress

from starlette.requests import Request

from jobstream.server.auth import unauthorized
from jobstream.server.problems import Problem
from jobstream.settings import Settings


def authorize(request: Request, settings: Settings) -> None:
    """Raise the 401 or 403 problem unless this request is an operator's."""
    header = request.headers.get("authorization")
    if settings.admin_key:
        scheme, _, key = (header or "").strip().partition(" ")
        # Constant time: the answer's timing must not spell the key out.
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            key.strip().encode(), settings.admin_key.encode()
        ):
            raise unauthorized(
                "Send Authorization: Bearer <the operator's key> (JOBSTREAM_ADMIN_KEY).",
                invalid=header is not None,
            )
        return
    if settings.require_api_key:
        raise unauthorized(
            "With API keys required, /admin/api needs the operator's key (JOBSTREAM_ADMIN_KEY).",
            invalid=header is not None,
        )
    if header is not None:
        raise unauthorized(
            "No operator key is set (JOBSTREAM_ADMIN_KEY): send no Authorization header.",
            invalid=True,
        )
    host = request.client.host if request.client is not None else None
    if not is_loopback(host):
        raise Problem(
            403, "admin-loopback-only", "Operators only",
            "Without JOBSTREAM_ADMIN_KEY, /admin/api answers loopback clients only.",
        )  # fmt: skip


def is_loopback(host: str | None) -> bool:
    """127.0.0.0/8 or ::1 (an IPv4 address mapped into IPv6 as well); anything else, a name
    or no address (a Unix socket: whoever can reach it), is not."""
    if host is None:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback
