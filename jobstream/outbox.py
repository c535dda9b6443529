"""The webhook outbox: a job's end and its delivery row commit together (docs/design.md,
"Webhooks").

Writing the row in the transaction that ends the job means a crash can lose neither: a job that
ended has its delivery row, and a rolled-back end has none. worker/webhooks.py sends them.
"""

from __future__ import annotations

import uuid

from jobstream.db import Conn
from jobstream.sql import queries


async def record_end(conn: Conn, job_id: uuid.UUID) -> None:
    """Queue the job's `job.<status>` webhook, if it has a webhook_url.

    Call inside the ending transaction, after the UPDATE that made the job terminal.
    """
    await conn.execute(queries.INSERT_WEBHOOK_DELIVERY, job_id)
