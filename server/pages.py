"""The browser page: one HTML document for `/` and every `/jobs/{id}`, plus its assets."""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response

# The repository's static/, shipped in the jobstream package (a link in a checkout).
STATIC_DIR = Path(__file__).absolute().parent.parent / "resources" / "static"


async def index(request: Request) -> Response:
    # The page routes itself from location.pathname, so a job's link opens its view directly.
    return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})
