from __future__ import annotations

import logging

from jobstream.logs import Throttle

ACCEPT_ERROR = "socket.accept() out of system resource\nsocket: <asyncio.TransportSocket fd=7>"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def record(name: str, msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, args, None)


def test_a_floodable_line_passes_once_per_interval_then_says_how_many_were_held() -> None:
    clock = Clock()
    throttle = Throttle(10.0, clock=clock)
    passed = []
    for tick in range(2000):  # asyncio's retry storm: a failed accept every 10 ms for 20 s
        clock.now = tick * 0.01
        line = record("asyncio", ACCEPT_ERROR)
        if throttle.filter(line):
            passed.append(line.getMessage())
    assert len(passed) == 2
    assert passed[0] == ACCEPT_ERROR
    assert passed[1].startswith(ACCEPT_ERROR)
    assert passed[1].endswith("[999 more like this since the last one, not logged]")


def test_kinds_are_counted_apart_and_other_lines_always_pass() -> None:
    throttle = Throttle(10.0, clock=Clock())
    assert throttle.filter(record("asyncio", ACCEPT_ERROR))
    assert throttle.filter(record("uvicorn.error", "Exceeded concurrency limit."))
    assert not throttle.filter(record("asyncio", ACCEPT_ERROR))
    assert not throttle.filter(record("uvicorn.error", "Exceeded concurrency limit."))
    for _ in range(3):
        assert throttle.filter(record("asyncio", "Task exception was never retrieved"))
        assert throttle.filter(record("jobstream.worker", "attempt %s failed", 1))
