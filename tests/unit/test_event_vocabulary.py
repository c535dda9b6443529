"""One vocabulary of event types. What the product writes to job_events, what schema.sql's CHECK
allows, `EventType`, the types the page listens for (static/stream.js) and the table of
docs/streams.md name the same types. `resync` alone is never stored: the server makes it for a
cursor inside a compacted range (server/tail.py).
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path
from typing import get_args

from jobstream.sql import Queries, queries
from jobstream.types import EventType
from tests.support.schema_sql import function_body

ROOT = Path(__file__).resolve().parents[2]
STORED = set(get_args(EventType))
SENT = STORED | {"resync"}


def written_by_the_product() -> set[str]:
    """The types appended from Python (`NewEvent("type", ...)`) and the literal types of the
    statements that insert events themselves (`SELECT id, seq, attempt, 'type', data`), those
    of a row's earlier events too (`jsonb_build_array('type', data)`: job_events.earlier)."""
    python = {
        kind
        for directory in ("jobstream", "server", "worker")
        for source in (ROOT / directory).rglob("*.py")
        for kind in re.findall(r'\bNewEvent\(\s*"(\w+)"', source.read_text(encoding="utf-8"))
    }
    # The blocks, and the function that CLAIM_JOBS calls (it opens each attempt's log).
    inserting = [*(getattr(queries, f.name) for f in fields(Queries)), function_body("claim_jobs")]
    sql = {
        kind
        for block in inserting
        if "INSERT INTO job_events" in block
        for kind in [
            *re.findall(r"^\s*SELECT [^'\n]*, '(\w+)',", block, re.MULTILINE),
            *re.findall(r"jsonb_build_array\(\s*'(\w+)',", block),
        ]
    }
    return python | sql


def test_the_product_writes_every_event_type_and_no_other() -> None:
    assert written_by_the_product() == STORED


def test_the_schema_allows_exactly_the_event_types() -> None:
    schema = (ROOT / "schema.sql").read_text(encoding="utf-8")
    [allowed] = re.findall(r"\n    type\s+text NOT NULL CHECK \(type IN\s*\(([^)]*)\)\)", schema)
    assert set(re.findall(r"'(\w+)'", allowed)) == STORED


def test_the_page_listens_for_every_event_sent() -> None:
    script = (ROOT / "static" / "stream.js").read_text(encoding="utf-8")
    [listed] = re.findall(r"^const EVENT_TYPES = \[([^\]]*)\];", script, re.MULTILINE)
    assert set(re.findall(r'"(\w+)"', listed)) == SENT


def test_docs_streams_documents_every_event_sent() -> None:
    page = (ROOT / "docs" / "streams.md").read_text(encoding="utf-8")
    section = page.split("## What a reader receives", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"^\| `(\w+)` \|", section, re.MULTILINE)) == SENT
