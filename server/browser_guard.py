"""Requests a browser was tricked into sending, refused before any route runs.

A page from anywhere on the web can make the browser of someone running the server send requests
to it. Two ways matter:

- *DNS rebinding*: attacker.example, its name pointed at 127.0.0.1 after the page loaded, is the
  same origin as the server for the browser, which lets the page read the answers. Its requests
  say `Host: attacker.example`; only the names of JOBSTREAM_ALLOWED_HOSTS are served (400
  `host-not-allowed`), with API keys on or off. /healthz and /readyz answer any Host: an
  orchestrator probes by address, and they tell nothing.
- *Cross-site requests*: with API keys off a request needs no credential, so any page could
  cancel the user's jobs or create jobs on the `default` tenant's budget. A browser names the
  page's origin in `Origin` on every request but a same-origin GET or HEAD (the Fetch standard's
  "append a request Origin header"): one naming another origin than the Host is refused (403
  `cross-origin`). And a body must be declared JSON (415 `unsupported-media-type`): without a
  CORS preflight, which this server never grants, a page can send a cross-site body only as a
  form or text/plain, so this holds even for a browser that left `Origin` out. A body-less POST
  (cancel, retry) needs no Content-Type: Origin alone guards it, as clients send it bare.

With API keys on, a request reaches anything only with `Authorization`, which no page can add to
a cross-site request without that preflight: the two cross-site checks are for keys off.
Requests on the metrics listener (server/listeners.py) pass untouched: it serves reads only, on
an address the operator chose for the scraper.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import orjson
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from jobstream.server import listeners, problems
from jobstream.server.problems import Problem
from jobstream.server.v1 import errors as v1_errors
from jobstream.settings import Settings

# What a request for any Host may reach (see the module's docstring).
ANY_HOST_PATHS = frozenset({"/healthz", "/readyz"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# JOBSTREAM_HOST values that name no one host: listening everywhere says nothing of the names.
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "*"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def allowed_hosts(settings: Settings) -> frozenset[str]:
    """JOBSTREAM_ALLOWED_HOSTS as host names (ports and IPv6 brackets dropped), with
    JOBSTREAM_HOST unless it is a wildcard; `*` in it allows any."""
    names = {_host_name(entry) for entry in settings.allowed_hosts.split(",") if entry.strip()}
    if settings.host.strip() not in WILDCARD_BINDS:
        names.add(_host_name(settings.host))
    return frozenset(name for name in names if name)


class BrowserGuard:
    """Pure ASGI (it wraps nothing it does not refuse): an SSE answer streams through as is."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        self.hosts = allowed_hosts(settings)
        self.any_host = "*" in self.hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not listeners.on_metrics_listener(scope, self.settings):
            problem = self._refusal(scope)
            if problem is not None:
                await _answer(problem, scope["path"])(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> Problem | None:
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if scope["path"] not in ANY_HOST_PATHS and not self._allowed(host):
            return Problem(
                400, "host-not-allowed", "Host not allowed",
                f"This server does not answer to Host {host[:100]!r}: its operator lists the "
                "names it answers to in JOBSTREAM_ALLOWED_HOSTS.",
            )  # fmt: skip
        if self.settings.require_api_key:
            return None
        origin = headers.get("origin")
        if origin is not None and not same_origin(origin, host):
            return Problem(
                403, "cross-origin", "Cross-origin request refused",
                "A page of another origin may not call this server while API keys are off.",
            )  # fmt: skip
        if scope["method"] not in SAFE_METHODS and _body_not_json(headers):
            return Problem(
                415, "unsupported-media-type", "Unsupported media type",
                "Send a request body as application/json.",
            )  # fmt: skip
        return None

    def _allowed(self, host: str) -> bool:
        return self.any_host or _host_name(host) in self.hosts


def _body_not_json(headers: Headers) -> bool:
    content_type = headers.get("content-type")
    if content_type is None:
        # No body, nothing declared: cancel and retry as curl and the clients send them.
        return "transfer-encoding" in headers or headers.get("content-length", "0") != "0"
    # Media types are case-insensitive (RFC 9110 §8.3.1); any +json type is JSON too.
    media_type = content_type.split(";")[0].strip().lower()
    return not media_type.endswith(("/json", "+json"))


def same_origin(origin: str, host: str) -> bool:
    """Whether `origin` names the host and port the request was sent to. The scheme cannot be
    compared (a proxy ends TLS before this server), but it sets the port a Host without one
    means."""
    try:
        parts = urlsplit(origin)
        scheme, name, port = parts.scheme, parts.hostname, parts.port
    except ValueError:
        return False
    if scheme not in _DEFAULT_PORTS or not name:
        return False  # `Origin: null` (a sandboxed frame, a file) names no origin to compare
    default = _DEFAULT_PORTS[scheme]
    host_name, host_port = _split_host(host)
    return (name, port or default) == (host_name, host_port or default)


def _host_name(host: str) -> str:
    return _split_host(host)[0]


def _split_host(host: str) -> tuple[str, int | None]:
    """A Host value's name (lower case, no IPv6 brackets, no final dot) and port; ("", None)
    when it is malformed."""
    value = host.strip().lower()
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        port_text = rest.removeprefix(":") if rest.startswith(":") else None
        if rest and port_text is None:
            return "", None
    elif value.count(":") > 1:
        name, port_text = value, None  # an IPv6 address without brackets, as an entry may be
    else:
        name, _, port_text = value.partition(":")
    try:
        port = int(port_text) if port_text else None
    except ValueError:
        return "", None
    return name.rstrip("."), port


def _answer(problem: Problem, path: str) -> Response:
    """The refusal in the shape of the path's API: problem+json, or OpenAI's under /v1."""
    if not path.startswith(v1_errors.PREFIX):
        return problems.response(problem)
    body = v1_errors.openai_error(problem.body(), problem.status)
    return Response(orjson.dumps(body), status_code=problem.status, media_type="application/json")
