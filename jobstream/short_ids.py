"""A job's short id: what a person reads and types where the whole id is too long.

Ids are version-7 UUIDs (jobstream/job_ids.py): their first 12 hex digits are the time in
milliseconds, so the first 8 are shared by every job made within about a minute. The short id
is the id's random tail instead, its last 8 hex digits: two jobs share one about once in 4
billion, whenever they were made. The page (static/api.js, shortId) and the dashboard's API
spell it the same way; the admin jobs search finds a job by it.
"""

from __future__ import annotations

import uuid

SHORT_ID_LENGTH = 8


def short_id(job_id: str | uuid.UUID) -> str:
    """The last 8 hex digits of `job_id`, lower case."""
    return str(job_id).replace("-", "").lower()[-SHORT_ID_LENGTH:]
