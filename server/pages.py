"""The browser pages: one HTML document for `/` and every `/jobs/{id}`, the operator dashboard's
for `/admin/` (static/admin/, its sections routed by the URL's hash), plus their assets."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response

# The repository's static/, shipped in the jobstream package (a link in a checkout).
STATIC_DIR = Path(__file__).absolute().parent.parent / "resources" / "static"


async def index(request: Request) -> Response:
    # The page routes itself from location.pathname, so a job's link opens its view directly.
    return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})


async def admin(request: Request) -> Response:
    # No key asked for here: the document holds no data. The dashboard asks the operator for the
    # admin key and sends it on each /admin/api call, which is where access is decided.
    return FileResponse(STATIC_DIR / "admin" / "index.html", headers={"Cache-Control": "no-cache"})
