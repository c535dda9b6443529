"""`GET /openapi.json`: the whole HTTP API as an OpenAPI 3.1 document.

The document is a file written by hand next to this module, not generated from the handlers:
the handlers read raw requests (no models to derive it from), and API.md is the contract it
restates. tests/unit/test_openapi.py holds it to the app's routes, and the fuzz test
(tests/e2e/test_fuzz_api.py) holds it to what the server answers.

A server with jobs of its own (JOBSTREAM_APP) adds their schemas, from their pydantic models:
`<Name>Input` and `<Name>Output` for each, an `AppJobCreate` per job, and the create's body
becomes one of those or the built-in `JobCreate`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import orjson
from pydantic import TypeAdapter
from starlette.requests import Request
from starlette.responses import Response

from jobstream.app import JobDefinition

DOCUMENT = Path(__file__).resolve().parent / "openapi.json"
_REF = "#/components/schemas/{model}"
# The envelope of a named job's create: what the built-in job's create takes of it.
_ENVELOPE = (
    "priority", "max_attempts", "retry_unknown", "timeout_s", "webhook_url", "metadata", "run_at",
    "delay_s", "retain_s",
)  # fmt: skip


@cache
def _static() -> dict[str, Any]:
    document: dict[str, Any] = orjson.loads(DOCUMENT.read_bytes())
    return document


def build(jobs: Mapping[str, JobDefinition]) -> bytes:
    """The document of a server that creates `jobs` besides the built-in one."""
    if not jobs:
        return DOCUMENT.read_bytes()
    document = copy.deepcopy(_static())
    schemas: dict[str, Any] = document["components"]["schemas"]
    built_in = schemas["JobCreate"]["properties"]
    creates: list[dict[str, Any]] = [{"$ref": _REF.format(model="JobCreate")}]
    for name, job in sorted(jobs.items()):
        stem = _stem(name)
        input_schema = job.input.model_json_schema(ref_template=_REF)
        output_schema = TypeAdapter(job.output or str).json_schema(ref_template=_REF)
        for part in (input_schema, output_schema):
            schemas.update(part.pop("$defs", {}))
        schemas[f"{stem}Input"] = input_schema
        schemas[f"{stem}Output"] = output_schema
        create = f"{stem}JobCreate"
        schemas[create] = {
            "type": "object",
            "description": f"A create of the job `{name}`.",
            "required": ["job", "input"],
            "additionalProperties": False,
            "properties": {
                "job": {"const": name},
                "input": {"$ref": _REF.format(model=f"{stem}Input")},
                **{field: built_in[field] for field in _ENVELOPE if field in built_in},
                "max_cost_usd": {"type": ["number", "null"], "minimum": 0},
            },
        }
        creates.append({"$ref": _REF.format(model=create)})
    body = document["paths"]["/api/jobs"]["post"]["requestBody"]["content"]["application/json"]
    body["schema"] = {"oneOf": creates}
    return orjson.dumps(document)


def _stem(name: str) -> str:
    """A job name as a component name's stem: `document.analysis` -> `DocumentAnalysis`."""
    return "".join(part.capitalize() for part in re.split(r"[^a-zA-Z0-9]+", name) if part)


async def document(request: Request) -> Response:
    body: bytes = request.app.state.openapi
    return Response(body, media_type="application/json")
