"""Short ids are the random tail of a version-7 id, never its timestamp head."""

from __future__ import annotations

import uuid

from jobstream.job_ids import new_ids
from jobstream.short_ids import short_id


def test_a_short_id_is_the_last_8_hex_digits() -> None:
    job_id = "01938a2b-7c4d-7e5f-8a9b-0c1d2e3f4a5b"
    assert short_id(job_id) == "2e3f4a5b"
    assert short_id(uuid.UUID(job_id)) == "2e3f4a5b"
    assert short_id(job_id.upper()) == "2e3f4a5b"


def test_jobs_made_in_the_same_millisecond_have_different_short_ids() -> None:
    ids = new_ids(1000)
    assert len({i[:8] for i in ids}) == 1  # the head: the time, shared
    assert len({short_id(i) for i in ids}) == 1000
