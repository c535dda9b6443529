"""bench.queue_side_by_side's results: one row per figure, both sides' repeats, and the summary
table."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

JOBSTREAM, PGQUEUER = "jobstream", "pgqueuer"


@dataclass
class Row:
    """One figure measured on both sides, one value per repeat (None: not available)."""

    scenario: str
    unit: str
    higher_is_better: bool
    sides: tuple[str, str] = (JOBSTREAM, PGQUEUER)
    values: dict[str, list[float | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for side in self.sides:
            self.values.setdefault(side, [])

    def median(self, side: str) -> float | None:
        known = [v for v in self.values[side] if v is not None]
        return statistics.median(known) if known else None

    def spread(self, side: str) -> str:
        known = [v for v in self.values[side] if v is not None]
        if not known:
            return "n/a"
        return " / ".join(self._fmt(v) for v in (min(known), statistics.median(known), max(known)))

    def ratio(self) -> str:
        ours, theirs = self.median(self.sides[0]), self.median(self.sides[1])
        if ours is None or theirs is None or theirs == 0:
            return "n/a"
        return f"{ours / theirs:.2f}"

    def _fmt(self, value: float) -> str:
        if self.unit == "ms":
            return f"{value:.2f}"
        if self.unit == "x":
            return f"{value:.2f}"
        return f"{value:,.0f}"


@dataclass
class Table:
    rows: dict[str, Row] = field(default_factory=dict)
    # The two columns, compared as first / second: the queues, or one queue two ways
    # (bench/queue_via_pgbouncer.py: direct and through PgBouncer).
    sides: tuple[str, str] = (JOBSTREAM, PGQUEUER)

    def add(self, scenario: str, unit: str, side: str, value: float | None) -> None:
        higher = unit == "jobs/s"
        row = self.rows.setdefault(scenario, Row(scenario, unit, higher, self.sides))
        row.values[side].append(value)

    def print_rows(self, scenarios: list[str]) -> None:
        for name in scenarios:
            row = self.rows[name]
            first, second = self.sides
            print(
                f"    = {name} [{row.unit}]: {first} {row.spread(first)};"
                f" {second} {row.spread(second)}; ratio of medians {row.ratio()}"
            )

    def render(self) -> str:
        first, second = self.sides
        ratio = "js/pgq" if self.sides == (JOBSTREAM, PGQUEUER) else f"{first}/{second}"
        head = ("scenario", "unit", f"{first} min / median / max", f"{second} min / median / max",
                ratio)  # fmt: skip
        lines = [
            (r.scenario, r.unit + (" ^" if r.higher_is_better else " v"), r.spread(first),
             r.spread(second), r.ratio())
            for r in self.rows.values()
        ]  # fmt: skip
        widths = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head))]
        out = []
        for n, line in enumerate([head, *lines]):
            cells = [line[0].ljust(widths[0]), line[1].ljust(widths[1])]
            cells += [cell.rjust(width) for cell, width in zip(line[2:], widths[2:], strict=True)]
            out.append("  ".join(cells))
            if n == 0:
                out.append("  ".join("-" * w for w in widths))
        out.append(f"(^ higher is better, v lower is better; {ratio} is the ratio of the medians)")
        return "\n".join(out)
