"""The headers every answer carries, so that a browser holds the page and the API to what they
are: not framed by another site, never sniffed into another type, no URL leaked to other sites.

Added as the answer starts (pure ASGI, not BaseHTTPMiddleware, which would buffer an SSE
stream), outside even Starlette's error middleware, so that a 500 carries them too. The server's
name is left out by uvicorn's `server_header=False` (server/__main__.py).
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The page (static/): its own scripts, styles and calls only, no inline code; `data:` for the
# empty favicon of index.html. Scripts set styles through the CSSOM, which style-src allows.
PAGE_POLICY = (
    b"default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    b"form-action 'self'; frame-ancestors 'none'"
)
# Anything else, opened as a document (a problem+json in a tab), may load nothing.
OTHER_POLICY = b"default-src 'none'; frame-ancestors 'none'"
COMMON = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),  # frame-ancestors, for browsers that predate it
    # Not no-referrer: the Fetch standard ties the Origin of a POST that is not CORS to the
    # referrer policy, so under it a browser may send `Origin: null` on the page's own POSTs,
    # which server/browser_guard.py refuses (Chromium's fetch() still sends the origin; a
    # browser that follows the letter would not). same-origin keeps the page's URLs from
    # other sites all the same.
    (b"referrer-policy", b"same-origin"),
)


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                names = {name.lower() for name, _ in headers}
                html = any(
                    name.lower() == b"content-type" and value.lower().startswith(b"text/html")
                    for name, value in headers
                )
                policy = (b"content-security-policy", PAGE_POLICY if html else OTHER_POLICY)
                headers += [header for header in (policy, *COMMON) if header[0] not in names]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class SecuredStarlette(Starlette):
    """Starlette with SecurityHeaders around its whole stack, its error middleware included."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(super().build_middleware_stack())
