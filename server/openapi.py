"""`GET /openapi.json`: the whole HTTP API as an OpenAPI 3.1 document.

The document is a file written by hand next to this module, not generated from the handlers:
the handlers read raw requests (no models to derive it from), and docs/design.md is the contract
it restates. tests/unit/test_openapi.py holds it to the app's routes, and the fuzz test
(tests/e2e/test_fuzz_api.py) holds it to what the server answers.

A server with jobs of its own (JOBSTREAM_APP) adds their schemas, from their pydantic models:
`Job.<name>.Input`, `Job.<name>.Output` and `Job.<name>.Create` for each (the models they nest
as `Job.<name>.<Model>`: two jobs' models of one name never meet), and the create's body
becomes one of those creates or the built-in `JobCreate`.
"""

from __future__ import annotations

import copy
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
        stem = f"Job.{name}"
        nested = f"#/components/schemas/{stem}.{{model}}"
        input_schema = job.input.model_json_schema(ref_template=nested)
        output_schema = TypeAdapter(job.output or str).json_schema(ref_template=nested)
        for part in (input_schema, output_schema):
            schemas.update({f"{stem}.{model}": s for model, s in part.pop("$defs", {}).items()})
        schemas[f"{stem}.Input"] = input_schema
        schemas[f"{stem}.Output"] = output_schema
        envelope = {field: built_in[field] for field in _ENVELOPE if field in built_in}
        # The job's own defaults, where its decorator set them.
        own = {"max_attempts": job.max_attempts, "timeout_s": job.timeout_s,
               "retry_unknown": job.retry_unknown}  # fmt: skip
        for field, default in own.items():
            if field in envelope:
                envelope[field] = {**envelope[field], "default": default}
        schemas[f"{stem}.Create"] = {
            "type": "object",
            "description": f"A create of the job `{name}`.",
            "required": ["job"],
            "additionalProperties": False,
            "properties": {
                "job": {"const": name},
                "input": {"$ref": _REF.format(model=f"{stem}.Input")},
                **envelope,
                "max_cost_usd": {
                    "type": ["number", "null"], "minimum": 0, "default": job.max_cost_usd,
                    "description": "The most the job may spend (null: the job's own cap).",
                },
            },
        }  # fmt: skip
        creates.append({"$ref": _REF.format(model=f"{stem}.Create")})
    body = document["paths"]["/api/jobs"]["post"]["requestBody"]["content"]["application/json"]
    body["schema"] = {"oneOf": creates}
    return orjson.dumps(document)


async def document(request: Request) -> Response:
    body: bytes = request.app.state.openapi
    return Response(body, media_type="application/json")
