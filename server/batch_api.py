"""`POST /api/jobs/batch`: up to 1,000 creates in one request, one answer per item, in order.

Each item is a `POST /api/jobs` body with an optional `idempotency_key`, and passes the same
validation, idempotency, budget and rate rules as a single create. A bad item refuses that item
(its answer is the problem a single create would have given), never the batch. The batch is made
in one transaction (jobstream.creates.create_batch), its items checked a chunk at a time while
PostgreSQL writes the chunk before: first the items without a key, in request order, then the
keyed ones in key order, as every writer takes keys, so that no two batches wait on each other.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import structlog
from starlette.requests import Request
from starlette.responses import Response

from jobstream import creates, new_jobs, tracing
from jobstream.errors import RateLimited
from jobstream.server import estimates, job_input, representation, validation
from jobstream.server.auth import events_tokens, tenant_id
from jobstream.server.jobs_api import read_body, refusal_problem, require_json, reservation
from jobstream.server.problems import Problem
from jobstream.server.responses import json_response
from jobstream.server.simulated_rules import SimulatedRules
from jobstream.server.state import AppState, state

log = structlog.get_logger(__name__)

MAX_ITEMS = 1000
# Items a statement writes. Smaller chunks start the database sooner and leave less of the answer
# waiting for the last statement; each costs a statement's fixed share.
CHUNK = 250
# The first chunk is smaller: until it is checked, the database has nothing to write.
HEAD = 100
# The batch's last items go in a statement of their own: the answer waits for the last statement
# alone, while every earlier one runs as the server checks the next chunk.
TAIL = 50


async def create_batch(request: Request) -> Response:
    app = state(request)
    tenant = await tenant_id(request)
    tokens = await events_tokens(request)
    require_json(request)
    body = validation.parse_json(await read_body(request, app.settings.max_batch_body_bytes))
    items = body.get("jobs")
    if set(body) != {"jobs"} or not isinstance(items, list) or not 1 <= len(items) <= MAX_ITEMS:
        raise Problem(
            422, "validation", "Invalid request",
            f'The body must be {{"jobs": [...]}} with 1 to {MAX_ITEMS:,} jobs.',
            errors=[{"field": "jobs", "message": f"must be a list of 1 to {MAX_ITEMS:,} jobs"}],
        )  # fmt: skip
    try:
        app.create_rate.take(tenant, len(items))
    except RateLimited as exc:
        raise refusal_problem(exc) from exc
    answers: list[dict[str, Any] | None] = [None] * len(items)
    places: list[int] = []  # the valid items, in order
    # Read before the batch is written: its jobs are not among the counted, and each is
    # estimated behind the batch's earlier jobs of its provider (the order they start in).
    inputs = await app.estimates.inputs()
    now = estimates.now_of(app.clock)
    ahead: Counter[str] = Counter()

    def answer(place: int, outcome: new_jobs.Created) -> None:
        job = outcome.job
        if outcome.created:
            estimate = inputs.remaining(job, now, besides=ahead[job.provider], counted=False)
            ahead[job.provider] += 1
        else:  # a replay: an earlier job, counted if still queued
            estimate = inputs.remaining(job, now)
        body = representation.created(job, tokens, estimate)
        body["replayed"] = not outcome.created
        answers[places[place]] = body

    outcomes = await creates.create_batch(
        app.pool, tenant, _checked(app, items, answers, places),
        clock=app.clock, announce=app.notices.announce, on_created=answer,
        in_key_order=True, rank=places.__getitem__,
        storage_bytes=app.settings.tenant_storage_bytes or None,
    )  # fmt: skip
    created = 0
    for place, (i, outcome) in enumerate(zip(places, outcomes, strict=True)):
        if isinstance(outcome, new_jobs.Created):
            created += outcome.created
            if not outcome.created:  # a replay: known once the batch's keys were read
                answer(place, outcome)
        else:
            answers[i] = refusal_problem(outcome).body()
    log.info("jobs_created", tenant_id=tenant, items=len(items), created=created)
    return json_response({"results": answers})


def _checked(
    app: AppState,
    items: list[Any],
    answers: list[dict[str, Any] | None],
    places: list[int],
) -> Iterator[list[new_jobs.NewJob]]:
    """The valid items as jobs to create, CHUNK at a time, in _order's order; each refused
    item's answer is put in `answers`, each valid item's place in `places`. Lazy: create_batch
    takes a chunk while the database writes the one before."""
    rules = SimulatedRules.of(app.settings)  # once a batch, not once an item
    # Every item's job continues the batch's span (None: not traced).
    traceparent = tracing.traceparent()
    order = _order(app, items, answers)
    chunk: list[new_jobs.NewJob] = []
    size = HEAD
    tail_starts = len(order) - TAIL
    for n, (i, key) in enumerate(order):
        if n == tail_starts and chunk:
            yield chunk
            chunk = []
        try:
            chunk.append(_new_job(app, rules, items[i], key, traceparent))
        except Problem as problem:
            answers[i] = problem.body()
            continue
        places.append(i)
        if len(chunk) == size:
            yield chunk
            chunk = []
            size = CHUNK
    if chunk:
        yield chunk


def _order(
    app: AppState, items: list[Any], answers: list[dict[str, Any] | None]
) -> list[tuple[int, str | None]]:
    """The items to make with their keys, in the order they are written: those without a key
    in request order, then the keyed ones by key, then request order (the first of two with one
    key makes the job). An item refused for its key, or for not being an object, is answered."""
    plain: list[tuple[int, str | None]] = []
    keyed: list[tuple[int, str]] = []
    for i, item in enumerate(items):
        try:
            key = _key(app, item)
        except Problem as problem:
            answers[i] = problem.body()
            continue
        if key is None:
            plain.append((i, None))
        else:
            keyed.append((i, key))
    keyed.sort(key=lambda pair: pair[1])  # stable: request order among equal keys
    return plain + keyed


def _key(app: AppState, item: object) -> str | None:
    """The item's idempotency key, taken out of it (parsed for this request alone: in place,
    not a copy)."""
    if not isinstance(item, dict):
        raise Problem(422, "validation", "Invalid request", "Each job must be a JSON object.")
    raw_key = item.pop("idempotency_key", None)
    if raw_key is not None and not isinstance(raw_key, str):
        raise Problem(
            400, "invalid-idempotency-key", "Invalid Idempotency-Key",
            "idempotency_key must be a string.",
        )  # fmt: skip
    return validation.idempotency_key(raw_key, required=app.settings.require_idempotency_key)


def _new_job(
    app: AppState,
    rules: SimulatedRules,
    fields: dict[str, Any],
    key: str | None,
    traceparent: str | None,
) -> new_jobs.NewJob:
    settings = app.settings
    spec = job_input.any_job_spec(
        app.jobs,
        fields,
        default_provider=settings.default_provider,
        simulated=rules,
        allow_private_webhooks=settings.webhook_allow_private,
    )
    # The item as sent (its idempotency_key taken out): what a replay is compared by.
    sent = fields if key is not None else None
    reserved = reservation(app.providers, spec)
    return new_jobs.NewJob(spec, key, reserved, sent=sent, traceparent=traceparent)
