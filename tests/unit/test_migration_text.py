"""Which migration files hold statements to run (jobstream/migrations.py)."""

from __future__ import annotations

from jobstream.migrations import has_statements


def test_comments_and_blank_lines_alone_are_nothing_to_run() -> None:
    assert not has_statements("")
    assert not has_statements("-- routines changed: claim_jobs\n\n   -- indented  \n\t\n")


def test_a_statement_among_comments_is_run() -> None:
    assert has_statements("-- why\nALTER TABLE jobs ADD COLUMN x int; -- and how\n")
    # Regression: comment lines ending in spaces made the old regular expression backtrack
    # exponentially (18 lines: 263 s), so a start-up would hang on such a migration.
    assert has_statements("-- a comment line  \n" * 40 + "CREATE TABLE x ();")
    assert not has_statements("-- a comment line  \n" * 40)
