"""What a chaos run (tests/support/chaos.py) does, `Plan`, and what it found, `Figures`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Plan:
    duration_s: float  # how long the faults go on
    jobs: int  # created over the first 80 % of it
    workers: int = 3
    servers: int = 2
    worker_kill_every_s: float = 2.0  # one worker, chosen at random, each time (±25 %)
    server_restart_every_s: float = 10.0
    postgres_restart_every_s: float = 25.0
    tokens: tuple[int, int] = (30, 90)  # per job, at 40 tokens/s: about 1-2 s of streaming
    settle_timeout_s: float = 90.0  # after the faults stop, for every job and follower to end
    # JOBSTREAM_COMPACT_AFTER_S for the workers (None: the default, 5 minutes). Below the run's
    # length, the janitor compacts jobs' logs while others run and followers read.
    compact_after_s: float | None = None


@dataclass
class Figures:
    jobs: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    attempts: int = 0
    attempts_lost: int = 0
    worker_kills: int = 0
    server_restarts: int = 0
    postgres_restarts: int = 0
    create_retries: int = 0  # creates sent again with their key after a failure
    followers: int = 0
    follower_reconnects: int = 0  # after a dropped connection or a refused one
    follower_hangups: int = 0  # readers that hung up on purpose and resumed from their cursor
    follower_resyncs: int = 0  # cursors inside a compacted range: resumed from the snapshot
    logs_compacted: int = 0  # jobs whose log the janitor had compacted when it was checked
    followers_of_compacted: int = 0  # readers that received compacted events
    events_checked: int = 0
    elapsed_s: float = 0.0
    problems: list[str] = field(default_factory=list)  # every promise broken; empty: all held

    def summary(self) -> str:
        lines = [
            f"jobs:               {self.jobs} {dict(sorted(self.statuses.items()))}",
            f"attempts:           {self.attempts} ({self.attempts_lost} lost to a dead worker)",
            f"worker kills (-9):  {self.worker_kills}",
            f"server restarts:    {self.server_restarts} (kill -9, then start)",
            f"postgres restarts:  {self.postgres_restarts} (immediate stop: a crash, then start)",
            f"create retries:     {self.create_retries}",
            f"followers:          {self.followers} ({self.follower_reconnects} reconnects, "
            f"{self.follower_hangups} deliberate hang-ups, {self.follower_resyncs} resyncs)",
            f"compacted logs:     {self.logs_compacted} when checked; {self.followers_of_compacted}"
            f" followers received compacted events",
            f"events checked:     {self.events_checked}",
            f"time:               {self.elapsed_s:.0f} s",
            f"problems:           {len(self.problems)}",
            *(f"  - {problem}" for problem in self.problems[:50]),
        ]
        return "\n".join(lines)
