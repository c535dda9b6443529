"""The statements in jobstream/sql spell out what Python names too: the NOTIFY channels, the
statuses of `status IN (...)` lists and the histograms' bounds. These keep the two in step, and
check that every block is run by the product and that nothing names a block that does not exist.
(That every block parses: tests/integration/test_sql_blocks.py.)
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from jobstream import channels
from jobstream.sql import Queries, parse, queries
from jobstream.types import (
    ACTIVE_STATUSES,
    DURATION_BUCKETS,
    FAILED_STATUSES,
    TERMINAL_STATUSES,
)
from tests.support.schema_sql import function_body

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = {f.name: getattr(queries, f.name) for f in fields(Queries)}
# The blocks, and the statements of the function that CLAIM_JOBS calls.
EVERY_STATEMENT = "\n".join([*BLOCKS.values(), function_body("claim_jobs")])
# Where the product runs them; the tests may name them too.
PRODUCT = ("server", "worker", "jobstream", "bench")
_NAMED = re.compile(r"\bqueries\.([A-Z][A-Z_]*)\b")


def named_in(*directories: str) -> set[str]:
    return {
        name
        for directory in directories
        for source in (ROOT / directory).rglob("*.py")
        for name in _NAMED.findall(source.read_text(encoding="utf-8"))
    }


def test_a_block_is_its_statement_without_its_header_and_notes() -> None:
    text = (
        "-- the file's notes\n\n"
        "-- name: ONE\n-- why\n-- and why\nSELECT 1\n  -- kept\n  FROM t\n\n"
        "-- name: TWO\nSELECT 2\n"
    )
    assert parse(text) == {
        "ONE": "SELECT 1\n  -- kept\n  FROM t",
        "TWO": "SELECT 2",
    }


def test_every_block_is_run_by_the_product() -> None:
    assert set(BLOCKS) - named_in(*PRODUCT) == set()


def test_no_code_names_a_block_that_does_not_exist() -> None:
    assert named_in(*PRODUCT, "tests") - set(BLOCKS) == set()


def test_statements_notify_on_the_channels_the_listeners_listen_on() -> None:
    notified = re.findall(r"pg_notify\(('?)(\w+)", EVERY_STATEMENT)
    assert all(quote for quote, _ in notified), "a channel that is not a literal"
    assert {channel for _, channel in notified} == {
        channels.CHANNEL_EVENTS,
        channels.CHANNEL_JOBS,
        channels.CHANNEL_CANCEL,
    }


def test_status_lists_are_the_active_the_terminal_or_the_failed_statuses() -> None:
    lists = re.findall(r"status IN \(([^)]*)\)", EVERY_STATEMENT)
    assert len(lists) >= 10
    for listed in lists:
        statuses = re.findall(r"'(\w+)'", listed)
        assert ", ".join(f"'{s}'" for s in statuses) == listed
        assert frozenset(statuses) in (ACTIVE_STATUSES, TERMINAL_STATUSES, FAILED_STATUSES), listed


def test_histograms_count_at_each_of_the_duration_buckets() -> None:
    histograms = re.findall(r"ARRAY\[(count\(\*\) FILTER .*?)\]", EVERY_STATEMENT, re.S)
    assert len(histograms) == 2  # queue waits (claim_jobs), run times (SUCCEED_ATTEMPTS)
    for histogram in histograms:
        assert histogram.count("count(*)") == len(DURATION_BUCKETS)
        bounds = re.findall(r"<= ([0-9.]+)\)", histogram)
        assert [float(b) for b in bounds] == list(DURATION_BUCKETS)
    # FINISH_ATTEMPT's one row: schema.sql's duration_counts.
    assert "duration_counts(array_agg(run_s ORDER BY run_s))" in queries.FINISH_ATTEMPT
    bounds = re.findall(r"width_bucket\(([0-9.]+), sorted\)", function_body("duration_counts"))
    assert [float(b) for b in bounds] == list(DURATION_BUCKETS)


def test_histograms_are_added_bucket_by_bucket() -> None:
    assert "ELSE ARRAY[" not in EVERY_STATEMENT  # merged by add_counts, not written out
    merged = re.findall(r"(\w+) = add_counts\(m\.(\w+), EXCLUDED\.(\w+)\)", EVERY_STATEMENT)
    # claim_jobs, SUCCEED_ATTEMPTS, FINISH_ATTEMPT (FOLD_METRIC_TOTALS sums them: sum_counts)
    assert len(merged) == 3
    assert all(column == m == excluded for column, m, excluded in merged)
    terms = re.findall(r"a\[(\d+)\] \+ b\[(\d+)\]", function_body("add_counts"))
    assert [(int(a), int(b)) for a, b in terms] == [
        (i, i) for i in range(1, len(DURATION_BUCKETS) + 1)
    ]
