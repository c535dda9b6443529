"""What a fleet run (tests/support/fleet_run.py) does, `Plan`; the phase it is in, `Phase`, against
which each failed request is counted; and what it found, `Figures`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

PHASES = ("warm-up", "servers-rolling", "workers-rolling", "postgres-restart", "after")
# The one phase whose requests may fail: the database is down for a moment.
DATABASE_DOWN = "postgres-restart"


@dataclass(frozen=True)
class Plan:
    jobs: int = 1000
    followers: int = 100
    create_over_s: float = 60.0  # the creates, evenly spread
    warm_up_s: float = 8.0  # load before the first restart
    servers_rolled: int = 2
    workers_rolled: int = 3
    restart_postgres: bool = True
    tokens: tuple[int, int] = (20, 60)  # per job, at 40 tokens/s
    # A followed built-in job streams at this rate instead (3-9 s): many streams are open when
    # a server stops, for its drain to hand over.
    followed_tokens_per_second: int = 10
    settle_timeout_s: float = 120.0


@dataclass
class Figures:
    jobs: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    lost: int = 0  # created (a 2xx) and then missing, or never terminal
    doubled: int = 0  # more than one accepted attempt, or two jobs for one key
    followers: int = 0
    followers_exact: int = 0  # ended with exactly result.text and the done event
    open_at_roll: int = 0  # followers still reading when the first server was stopped
    reconnects: Counter[str] = field(default_factory=Counter)  # per phase
    reconnect_reasons: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)  # per phase
    # Error lines the processes logged while PostgreSQL restarted (not a problem: reported).
    logged_in_restart: Counter[str] = field(default_factory=Counter)
    error_samples: list[str] = field(default_factory=list)
    restarts: list[str] = field(default_factory=list)  # what was restarted, how long it took
    elapsed_s: float = 0.0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        errors = {phase: self.errors.get(phase, 0) for phase in PHASES}
        reconnects = {phase: self.reconnects.get(phase, 0) for phase in PHASES}
        return "\n".join(
            [
                f"jobs:               {self.jobs} {dict(sorted(self.statuses.items()))}",
                f"lost:               {self.lost}",
                f"accepted twice:     {self.doubled}",
                f"followers:          {self.followers} ({self.followers_exact} exact;"
                f" {self.open_at_roll} reading when the servers' roll began)",
                f"errors per phase:   {errors}",
                f"reconnects/phase:   {reconnects}",
                f"logged in restart:  {dict(self.logged_in_restart)}",
                f"reconnect reasons:  {dict(self.reconnect_reasons.most_common(5))}",
                *(f"restart:            {r}" for r in self.restarts),
                f"time:               {self.elapsed_s:.0f} s",
                f"problems:           {len(self.problems)}",
                *(f"  - {p}" for p in self.problems[:40]),
                # What the clients saw: only worth reading when something failed.
                *(f"  error: {e[:160]}" for e in self.error_samples[:20] if self.problems),
            ]
        )


class Phase:
    """Which part of the run it is now: every failure is counted against it."""

    def __init__(self, figures: Figures) -> None:
        self.now = PHASES[0]
        self._figures = figures

    def error(self, what: str) -> None:
        self._figures.errors[self.now] += 1
        if len(self._figures.error_samples) < 50:
            self._figures.error_samples.append(f"[{self.now}] {what}")

    def reconnect(self, reason: str) -> None:
        self._figures.reconnects[self.now] += 1
        self._figures.reconnect_reasons[reason[:60]] += 1
