"""`GET /api/job-types`: the jobs this server creates, each with its input and output schema.

The page builds its job picker and forms from it; a client may check an input before it sends.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from jobstream.app import JobDefinition
from jobstream.jobspec import BUILT_IN_JOB, DEFAULT_TIMEOUT_S
from jobstream.server.auth import tenant_id
from jobstream.server.responses import json_response
from jobstream.server.state import state

# The built-in job's input in brief: its prompt. The whole create body is JobCreate in
# /openapi.json.
_BUILT_IN = {
    "name": BUILT_IN_JOB,
    "description": "One prompt to one model, its answer streamed.",
    "input_schema": {
        "type": "object",
        "required": ["prompt"],
        "properties": {"prompt": {"type": "string", "minLength": 1, "title": "Prompt"}},
    },
    "output_schema": {"type": "string"},
    "max_attempts": 3,
    "timeout_s": DEFAULT_TIMEOUT_S,
    "max_cost_usd": None,
}


def described(job: JobDefinition) -> dict[str, Any]:
    doc = (job.handler.__doc__ or "").strip()
    return {
        "name": job.name,
        "description": doc.splitlines()[0] if doc else None,
        "input_schema": job.input_schema(),
        "output_schema": job.output_schema(),
        "max_attempts": job.max_attempts,
        "timeout_s": job.timeout_s,
        "max_cost_usd": job.max_cost_usd,
    }


async def list_job_types(request: Request) -> Response:
    await tenant_id(request)  # the same readers as the jobs themselves
    jobs = state(request).jobs
    return json_response({"jobs": [_BUILT_IN, *(described(j) for _, j in sorted(jobs.items()))]})
