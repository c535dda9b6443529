"""A job that is not there: `410 Gone` when retention deleted it, else `404`.

The janitor leaves a tombstone for each job it deletes (JOBSTREAM_TOMBSTONE_S, 1 day by default);
while it is kept, the job's id answers 410, so a client can tell "expired" from "never existed".
Only the job's own tenant (or the holder of its signed events token) learns that: to anyone
else it is a 404, like every other tenant's job. The tombstone is read only on this miss path.
"""

from __future__ import annotations

import uuid

from jobstream import retention
from jobstream.server.problems import Problem, not_found
from jobstream.server.state import AppState


async def missing(
    app: AppState, job_id: uuid.UUID, tenant_id: str | None, *, name: str | None = None
) -> Problem:
    """The problem to raise for a job id that names no job (`tenant_id` None: a signed token).

    `name` is how the answer calls the job, `job <id>` by default (/v1: `response resp_...`).
    """
    name = name or f"job {job_id}"
    deleted_at = await retention.deleted_at(app.pool, job_id, tenant_id)
    if deleted_at is None:
        return not_found(f"No {name}.")
    return Problem(
        410, "gone", "Gone",
        f"{name[:1].upper()}{name[1:]} ended longer ago than its retention and was deleted at"
        f" {deleted_at.isoformat()}.",
    )  # fmt: skip
