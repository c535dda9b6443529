"""The steps running in an attempt (worker/steps.py), and which one the running code is part of.

Shared by the steps and the attempt's writes (worker/job_writes.py), which route a step's text
through it: noted for the step's journal, and kept back while other steps run at once.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any

from jobstream.usage import Usage


@dataclass(eq=False)
class StepRun:
    """A step running in this attempt."""

    key: str
    output: list[dict[str, Any]] = field(default_factory=list)  # text and progress, in order
    held_back: list[str] = field(default_factory=list)  # text kept while other steps run
    usages: list[Usage] = field(default_factory=list)  # its finished model calls

    def wrote(self, text: str) -> None:
        if self.output and "text" in self.output[-1]:
            self.output[-1]["text"] += text
        else:
            self.output.append({"text": text})


# The step the running code is part of: set in the task (or thread) that runs the step, so a
# model call or an emit knows whose it is, however many steps run at once.
CURRENT: contextvars.ContextVar[StepRun | None] = contextvars.ContextVar(
    "jobstream_step", default=None
)


class Running:
    """The steps running now, shared by the steps and the attempt's writes (worker/job_writes.py)
    without either holding the other."""

    def __init__(self) -> None:
        self.runs: list[StepRun] = []

    def keeps(self, text: str) -> bool:
        """Text the running code wrote: noted in its step's journal, and True when it is kept
        back (other steps run at once) rather than written now."""
        run = CURRENT.get()
        if run is None:
            return False
        run.wrote(text)
        if len(self.runs) > 1:
            run.held_back.append(text)
            return True
        return False

    def noted(self, progress: dict[str, Any]) -> None:
        run = CURRENT.get()
        if run is not None:
            run.output.append({"progress": progress})

    def end(self, run: StepRun) -> list[str]:
        """`run` ended: the text to write now (its own kept back, and the text of the one step
        left, which from now on writes live)."""
        self.runs.remove(run)
        released = [run, *self.runs] if len(self.runs) == 1 else [run]
        texts = []
        for each in released:
            if each.held_back:
                texts.append("".join(each.held_back))
                each.held_back = []
        return texts
