"""The NOTIFY channels: the statements in jobstream/sql notify on them (spelt out there, and
tests/unit/test_sql_literals.py keeps the two in step); the listeners listen on them.

NOTIFY payloads carry only identifiers: the tables are the truth.
"""

from __future__ import annotations

from typing import Final

# payload "job_id:last_seq", or several joined by commas (a worker's token writes of one tick);
# the id as uuid::text writes it (lowercase, hyphenated, as str(UUID)): the hub matches it as text
CHANNEL_EVENTS: Final = "jobstream_events"
CHANNEL_JOBS: Final = "jobstream_jobs"  # payload "provider": a job became runnable
CHANNEL_CANCEL: Final = "jobstream_cancel"  # payload "job_id": a running job was asked to stop
