from __future__ import annotations

import resource
from collections.abc import Iterator

import pytest

from jobstream.server.connections import (
    DERIVED_MAX_CONNECTIONS,
    connection_limit,
    raise_open_file_limit,
)


def test_the_connection_cap_is_half_the_open_files_unless_set() -> None:
    assert connection_limit(None, 1024) == 512
    assert connection_limit(None, 1_048_576) == DERIVED_MAX_CONNECTIONS
    assert connection_limit(None, 1) == 1
    assert connection_limit(50, 1024) == 50  # JOBSTREAM_MAX_CONNECTIONS wins


@pytest.fixture
def open_files() -> Iterator[tuple[int, int]]:
    """This process's open-file limits, put back after the test."""
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    yield limits
    resource.setrlimit(resource.RLIMIT_NOFILE, limits)


def test_the_soft_open_file_limit_is_raised_to_the_hard_one(open_files: tuple[int, int]) -> None:
    _, hard = open_files
    if hard == resource.RLIM_INFINITY or hard < 2048:
        pytest.skip(f"a hard open-file limit of {hard} gives nothing to raise to here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    assert raise_open_file_limit() == hard
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    assert raise_open_file_limit() == hard  # already there: nothing to do
