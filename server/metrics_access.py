"""Who may read /metrics: its figures (jobs, costs, providers) are every tenant's at once, so
with API keys on they are an operator's, never a tenant's.

JOBSTREAM_METRICS_KEY, when set, is required wherever /metrics is served, as `Authorization:
Bearer <key>`. Without it, /metrics is open on a metrics listener of its own (an address only
the scraper reaches: server/listeners.py) and while API keys are off (`make run`); on the API's
port with keys on it is refused, as nothing would tell the operator from a tenant.
"""

from __future__ import annotations

import hmac

from starlette.requests import Request

from jobstream.server.auth import unauthorized
from jobstream.settings import Settings


def authorize(request: Request, settings: Settings) -> None:
    """Raise the 401 problem unless this request may read /metrics."""
    header = request.headers.get("authorization")
    if not settings.metrics_key:
        if settings.require_api_key and settings.metrics_port is None:
            raise unauthorized(
                "With API keys required, /metrics needs the operator's key "
                "(JOBSTREAM_METRICS_KEY) or a port of its own (JOBSTREAM_METRICS_PORT).",
                invalid=header is not None,
            )
        return
    scheme, _, key = (header or "").strip().partition(" ")
    # Compared in constant time: the answer's timing must not spell the key out.
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        key.strip().encode(), settings.metrics_key.encode()
    ):
        raise unauthorized(
            "Send Authorization: Bearer <the operator's metrics key>.", invalid=header is not None
        )
