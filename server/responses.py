"""JSON responses, encoded with orjson."""

from __future__ import annotations

import orjson
from starlette.responses import Response


def json_response(
    body: object, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(
        orjson.dumps(body), status_code=status, media_type="application/json", headers=headers
    )
