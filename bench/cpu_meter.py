"""CPU time a drain costs, split between PostgreSQL and the consumers, from Linux's /proc.

Issue 39's drains are not bound by the cores (neither side fills two of them): a drain's rate
follows the CPU a job costs the database and the consumer process, spent in turns. These are
those two figures for each side, so a change to either shows where it moved. The database's
share is every process of the cluster: its live processes' time plus what the postmaster has
collected from children that exited meanwhile (cutime, cstime). On a system without /proc the
figures are None.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncpg

PROC = Path("/proc")
# /proc/<pid>/stat fields after the command's closing parenthesis, counted from 0 there.
PPID, UTIME, STIME, CUTIME, CSTIME = 1, 11, 12, 13, 14


@dataclass(frozen=True)
class CpuSplit:
    """CPU seconds over a window: the cluster's processes, and the consumers'."""

    database_s: float
    consumers_s: float

    def per_job_us(self, jobs: int) -> tuple[float, float]:
        return self.database_s / jobs * 1e6, self.consumers_s / jobs * 1e6


def _fields(pid: int) -> list[str] | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:  # exited, or no /proc
        return None
    return stat[stat.rindex(")") + 2 :].split()


def _ticks(pid: int, *, with_children: bool = False) -> int:
    fields = _fields(pid)
    if fields is None:
        return 0
    ticks = int(fields[UTIME]) + int(fields[STIME])
    if with_children:
        ticks += int(fields[CUTIME]) + int(fields[CSTIME])
    return ticks


def _cluster_ticks(postmaster: int) -> int:
    total = _ticks(postmaster, with_children=True)
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            fields = _fields(int(entry.name))
            if fields is not None and int(fields[PPID]) == postmaster:
                total += _ticks(int(entry.name))
    return total


class CpuMeter:
    """`start()` before the consumers work, `stop()` while they still run (an exited process's
    time is no longer in /proc)."""

    def __init__(self, postmaster: int | None, consumers: Sequence[int]) -> None:
        self._postmaster = postmaster
        self._consumers = list(consumers)
        self._hz = os.sysconf("SC_CLK_TCK")
        self._started: tuple[int, int] | None = None

    @classmethod
    async def of(cls, conn: asyncpg.Connection, consumers: Sequence[int]) -> CpuMeter:
        """A meter of the cluster `conn` is connected to (when it runs on this machine)."""
        backend: int = await conn.fetchval("SELECT pg_backend_pid()")
        fields = _fields(backend)
        return cls(None if fields is None else int(fields[PPID]), consumers)

    def _now(self) -> tuple[int, int] | None:
        if self._postmaster is None or _fields(self._postmaster) is None:
            return None
        return _cluster_ticks(self._postmaster), sum(_ticks(pid) for pid in self._consumers)

    def start(self) -> None:
        self._started = self._now()

    def stop(self) -> CpuSplit | None:
        now = self._now()
        if self._started is None or now is None:
            return None
        (db_before, consumers_before), (db_after, consumers_after) = self._started, now
        return CpuSplit(
            (db_after - db_before) / self._hz, (consumers_after - consumers_before) / self._hz
        )
