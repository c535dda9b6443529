"""The names and origins server/browser_guard.py compares (over HTTP:
tests/integration/test_browser_guard.py)."""

from __future__ import annotations

import pytest

from jobstream.server.browser_guard import allowed_hosts, same_origin
from jobstream.settings import Settings


def test_the_default_hosts_are_the_loopback_names_and_a_bound_address() -> None:
    assert allowed_hosts(Settings()) == {"localhost", "127.0.0.1", "::1"}
    assert "10.0.0.5" in allowed_hosts(Settings(host="10.0.0.5"))
    # Bound everywhere, the server knows no name of its own: the list is the operator's.
    for wildcard in ("0.0.0.0", "::"):
        assert allowed_hosts(Settings(host=wildcard)) == {"localhost", "127.0.0.1", "::1"}


def test_listed_hosts_lose_their_ports_brackets_case_and_final_dot() -> None:
    listed = Settings(allowed_hosts=" Jobs.Example.com:443, [::1], api.example.com., ,")
    assert allowed_hosts(listed) == {"jobs.example.com", "::1", "api.example.com", "127.0.0.1"}


@pytest.mark.parametrize(
    ("origin", "host", "same"),
    [
        ("http://localhost:8000", "localhost:8000", True),
        ("http://LOCALHOST:8000", "localhost:8000", True),
        ("https://jobs.example.com", "jobs.example.com", True),  # TLS ended by a proxy
        ("https://jobs.example.com", "jobs.example.com:443", True),
        ("http://[::1]:8000", "[::1]:8000", True),
        ("http://localhost:8001", "localhost:8000", False),
        ("http://127.0.0.1:8000", "localhost:8000", False),
        ("http://evil.example", "localhost:8000", False),
        ("https://jobs.example.com", "jobs.example.com:80", False),
        ("null", "localhost:8000", False),
        ("file://", "localhost", False),
        ("http://localhost:99999", "localhost:8000", False),  # a port out of range
        ("http://localhost:8000", "localhost:x", False),
    ],
)
def test_same_origin_compares_host_and_port(origin: str, host: str, same: bool) -> None:
    assert same_origin(origin, host) is same
