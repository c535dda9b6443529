"""Who is asking: the tenant of a request's API key (docs/design.md, "API keys and tenants").

`Authorization: Bearer <key>` names the tenant. A key that is sent is always checked: an unknown
or malformed one is 401 whatever the settings, so a typo never silently becomes the `default`
tenant. With no header, JOBSTREAM_REQUIRE_API_KEY decides: 401, or the `default` tenant (so
`make run` and the page work with no key). The key is never logged.

A key is the tenant's current one, or the one its last rotation replaced until the grace ends
(jobstream/tenants.py). The events_url tokens of a request's answers carry the generation of the
key it was made with (`events_tokens`), so they end with that key.
"""

from __future__ import annotations

from starlette.requests import Request

from jobstream import tenants
from jobstream.server.problems import Problem
from jobstream.server.state import state
from jobstream.server.stream_tokens import GenerationTokens

DEFAULT_TENANT = "default"


async def tenant_id(request: Request) -> str:
    """The request's tenant, resolved once per request (one key lookup, however often asked)."""
    cached: str | None = getattr(request.state, "tenant_id", None)
    if cached is None:
        cached = _remember(request, await _resolve(request))
    return cached


async def events_tokens(request: Request) -> GenerationTokens:
    """What signs the events_url tokens of this request's answers: the generation of the key
    it was made with (a caller still on the previous key, in its grace, gets tokens that end
    with that key). Without a key, the tenant's current generation, as this process read it
    within the last second (server/key_generations.py)."""
    tenant = await tenant_id(request)
    app = state(request)
    generation: int | None = getattr(request.state, "key_generation", None)
    if generation is None:
        generation = await app.generations.of(app.pool, tenant)
    return app.tokens.at(generation)


def _remember(request: Request, who: tenants.KeyHolder | str) -> str:
    """The request's tenant, and its key's generation if it sent a key, kept for the request."""
    if isinstance(who, tenants.KeyHolder):
        request.state.key_generation = who.generation
        who = who.tenant_id
    request.state.tenant_id = who
    return who


async def _resolve(request: Request) -> tenants.KeyHolder | str:
    """The key's holder, or the tenant named without a key."""
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
    holder = await tenants.key_holder(app.pool, key)
    if holder is None:
        raise unauthorized("The API key is not valid.", invalid=True)
    return holder


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
        found = (
            await tenants.key_holder(app.pool, key.strip()) if scheme.lower() == "bearer" else None
        )
        return _remember(request, found or DEFAULT_TENANT)
    return await tenant_id(request)


def unauthorized(detail: str, *, invalid: bool) -> Problem:
    # RFC 6750 §3: name the scheme; say invalid_token when a credential was sent and refused.
    challenge = 'Bearer error="invalid_token"' if invalid else "Bearer"
    return Problem(
        401, "unauthorized", "Unauthorized", detail, headers={"WWW-Authenticate": challenge}
    )
