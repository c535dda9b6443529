"""A create of a named job: `{"job": "<name>", "input": {...}}` and the envelope of any job.

The input is validated by the job's own model (pydantic), the envelope as for the built-in job
(server/job_body.py); one 422 names every bad field of both, each input error with pydantic's
location (`input.text`) and message. A body without `job`, or with `"job": "llm"`, is the
built-in job's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from pydantic import ValidationError

from jobstream.app import JobDefinition
from jobstream.jobspec import BUILT_IN_JOB, JobSpec
from jobstream.server import job_body
from jobstream.server.job_body import checked_envelope, raise_if_invalid
from jobstream.server.problems import Problem
from jobstream.server.simulated_rules import SimulatedRules
from jobstream.server.validation import MAX_DEPTH, Fields, storable

# The envelope's fields, and the job's own: anything else in the body is refused.
_KNOWN = frozenset(
    {"job", "input", "priority", "max_attempts", "retry_unknown", "timeout_s", "webhook_url",
     "metadata", "run_at", "delay_s", "retain_s", "max_cost_usd"}
)  # fmt: skip
# An input is stored as JSON in the job's row: bounded as a prompt is.
INPUT_MAX_BYTES = 1_000_000


def any_job_spec(
    jobs: Mapping[str, JobDefinition],
    body: dict[str, Any],
    *,
    default_provider: str,
    simulated: SimulatedRules,
    allow_private_webhooks: bool,
) -> JobSpec:
    """The JobSpec of a create's body, whichever job it names (none: the built-in one)."""
    if "job" in body:
        if body["job"] != BUILT_IN_JOB:
            return app_job_spec(
                jobs,
                body,
                default_provider=default_provider,
                allow_private_webhooks=allow_private_webhooks,
            )
        body = built_in_body(body)
    return job_body.job_spec(
        body,
        default_provider=default_provider,
        simulated=simulated,
        allow_private_webhooks=allow_private_webhooks,
    )


def built_in_body(body: dict[str, Any]) -> dict[str, Any]:
    """`{"job": "llm", "input": {prompt...}, envelope...}` as the built-in job's flat body."""
    flat = {k: v for k, v in body.items() if k not in ("job", "input")}
    given = body.get("input")
    if given is None:
        return flat
    if not isinstance(given, dict):
        raise _invalid([{"field": "input", "message": "must be an object"}])
    clash = sorted(set(given) & set(flat))
    if clash:
        raise _invalid(
            [{"field": f"input.{k}", "message": "also given outside input"} for k in clash]
        )
    return {**flat, **given}


def app_job_spec(
    jobs: Mapping[str, JobDefinition],
    body: dict[str, Any],
    *,
    default_provider: str,
    allow_private_webhooks: bool,
) -> JobSpec:
    """The JobSpec of a create of one of `jobs`, or a 422 naming every bad field."""
    name = body["job"]
    job = jobs.get(name) if isinstance(name, str) else None
    if job is None:
        known = ", ".join([BUILT_IN_JOB, *sorted(jobs)])
        raise _invalid([{"field": "job", "message": f"unknown job; this server has {known}"}])
    fields = Fields(body)
    for extra in sorted(set(body) - _KNOWN):
        fields.error(extra, "unknown field")
    envelope = checked_envelope(
        fields,
        allow_private_webhooks=allow_private_webhooks,
        max_attempts=job.max_attempts,
        timeout_s=job.timeout_s,
        retry_unknown=job.retry_unknown,
    )
    # Given (a number) it replaces the job's own cap, up or down; absent or null, the job's.
    max_cost = body.get("max_cost_usd")
    if max_cost is None:
        max_cost = job.max_cost_usd
    if max_cost is not None and (
        isinstance(max_cost, bool) or not isinstance(max_cost, int | float) or max_cost < 0
    ):
        fields.error("max_cost_usd", "must be a number, at least 0")
        max_cost = None
    value = _input(fields, job, body.get("input", {}))
    raise_if_invalid(fields)
    return JobSpec(
        prompt="",
        provider=job.provider or default_provider,
        job=name,
        input=value,
        max_cost_usd=float(max_cost) if max_cost is not None else None,
        invalid_output_retries=(
            job.invalid_output_retries if job.invalid_output_retries != 2 else None
        ),
        **envelope.fields(),
    )


def _input(fields: Fields, job: JobDefinition, raw: object) -> Any:
    """The input as the model validated it, as JSON (what the worker reads back)."""
    try:
        model = job.input.model_validate(raw)
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            where = ".".join(str(part) for part in error["loc"])
            fields.errors.append(
                {
                    "field": f"input.{where}" if where else "input",
                    "message": error["msg"],
                    "type": error["type"],
                }
            )
        return None
    # By alias: the worker validates it again with the same model, which reads aliases.
    value = model.model_dump(mode="json", by_alias=True)
    problem = storable(value, MAX_DEPTH)
    if problem is not None:
        fields.error("input", problem)
    elif len(orjson.dumps(value)) > INPUT_MAX_BYTES:
        fields.error("input", f"must be at most {INPUT_MAX_BYTES:,} bytes as JSON")
    return value


def _invalid(errors: list[dict[str, Any]]) -> Problem:
    return Problem(
        422, "validation", "Invalid request", f"{len(errors)} field(s) are invalid.", errors=errors
    )
