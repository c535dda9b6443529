"""Short ids are the random tail of a version-7 id, never its timestamp head."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

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


def test_the_page_spells_it_as_the_api_does() -> None:
    """static/api.js's shortId, run by node on the same ids."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node on this machine")
    ids = [*new_ids(3), "01938A2B-7C4D-7E5F-8A9B-0C1D2E3F4A5B"]
    module = (Path(__file__).resolve().parents[2] / "static" / "api.js").as_uri()
    script = (
        f"import {{ shortId }} from {json.dumps(module)};"
        f"console.log(JSON.stringify({json.dumps(ids)}.map(shortId)));"
    )
    out = subprocess.run(
        [node, "--input-type=module", "-e", script], capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == [short_id(i) for i in ids]
