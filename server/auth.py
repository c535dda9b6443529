"""Who is asking: the tenant of a request's API key (DESIGN.md §6, "Browser auth").

`Authorization: Bearer <key>` names the tenant. A key that is sent is always checked: an unknown
or malformed one is 401 whatever the settings, so a typo never silently becomes the `default`
tenant. With no header, JOBSTREAM_REQUIRE_API_KEY decides: 401, or the `default` tenant (so
`make run` and the page work with no key). The key is never logged.
"""

from __future__ import annotations

from starlette.requests import Request

from jobstream import tenants
from jobstream.server.problems import Problem
from jobstream.server.state import state

DEFAULT_TENANT = "default"


async def tenant_id(request: Request) -> str:
    """The request's tenant, resolved once per request (one key lookup, however often asked)."""
    cached: str | None = getattr(request.state, "tenant_id", None)
    if cached is None:
        cached = request.state.tenant_id = await _resolve(request)
    return cached


async def _resolve(request: Request) -> str:
    app = state(request)
    header = request.headers.get("authorization")
    if header is None:
        if app.settings.require_api_key:
            raise unauthorized("Send Authorization: Bearer <api key>.", invalid=False)
        return DEFAULT_TENANT
    scheme, _, key = header.strip().partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise unauthorized("Authorization must be `Bearer <api key>`.", invalid=True)
    tenant = await tenants.by_key(app.pool, key)
    if tenant is None:
        raise unauthorized("The API key is not valid.", invalid=True)
    return tenant


async def sdk_tenant_id(request: Request) -> str:
    """The tenant of a /v1 request. The official SDKs send `Authorization: Bearer` always, with
    whatever key they were given, so with keys not required any value that is not a tenant's key
    is the `default` tenant; with keys required, only a tenant's key passes."""
    cached: str | None = getattr(request.state, "tenant_id", None)
    if cached is not None:
        return cached
    app = state(request)
    if not app.settings.require_api_key:
        scheme, _, key = request.headers.get("authorization", "").strip().partition(" ")
        found = await tenants.by_key(app.pool, key.strip()) if scheme.lower() == "bearer" else None
        cached = request.state.tenant_id = found or DEFAULT_TENANT
        return cached
    return await tenant_id(request)


def unauthorized(detail: str, *, invalid: bool) -> Problem:
    # RFC 6750 §3: name the scheme; say invalid_token when a credential was sent and refused.
    challenge = 'Bearer error="invalid_token"' if invalid else "Bearer"
    return Problem(
        401, "unauthorized", "Unauthorized", detail, headers={"WWW-Authenticate": challenge}
    )
