from __future__ import annotations

import socket

import pytest

from jobstream import ports


def test_ports_are_never_handed_out_twice_and_lie_below_the_ephemeral_range() -> None:
    given = [ports.free_port() for _ in range(200)]
    assert len(set(given)) == len(given)
    assert all(10_000 <= port < ports._ephemeral_start() for port in given)


def test_a_port_something_listens_on_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = ports.free_port()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        # As if this process had never handed it out, and it were next in line.
        monkeypatch.setattr(ports, "_handed_out", set())
        monkeypatch.setattr(ports, "_next", taken)
        port = ports.free_port()
    assert port != taken
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # free indeed


def test_a_partitioned_process_keeps_to_its_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    # As a third of three workers would: the top third of the range below the ephemeral one.
    monkeypatch.setattr(ports, "_slice", None)
    monkeypatch.setattr(ports, "_next", None)
    ports.partition(2, 3)
    span = (ports._ephemeral_start() - 10_000) // 3
    given = [ports.free_port() for _ in range(50)]
    assert all(10_000 + 2 * span <= port < 10_000 + 3 * span for port in given)
    with pytest.raises(ValueError):
        ports.partition(3, 3)
