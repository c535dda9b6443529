"""`GET /openapi.json`: the whole HTTP API as an OpenAPI 3.1 document.

The document is a file written by hand next to this module, not generated from the handlers:
the handlers read raw requests (no models to derive it from), and API.md is the contract it
restates. tests/unit/test_openapi.py holds it to the app's routes, and the fuzz test
(tests/e2e/test_fuzz_api.py) holds it to what the server answers.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response

DOCUMENT = Path(__file__).resolve().parent / "openapi.json"


async def document(request: Request) -> Response:
    return FileResponse(DOCUMENT, media_type="application/json")
