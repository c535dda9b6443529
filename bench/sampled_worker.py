"""`python bench/sampled_worker.py OUT`: `python -m jobstream.worker`, its stack sampled every
millisecond of CPU time between SIGUSR1 (start) and SIGUSR2 (stop); at its exit, the samples go to
OUT (JSON), for bench.bench_providers.

Run as a file, not a module: the worker's code is whichever `jobstream` the child's PYTHONPATH
names (this checkout's or an anchor commit's worktree), and this folder leaves sys.path first.

A sampling profiler in a few lines, for want of py-spy: SIGPROF every millisecond of the
process's CPU (setitimer's ITIMER_PROF), and the handler adds the CPU time since its last call
to the main thread's Python stack. Python runs a handler between bytecodes only, and signals
that come meanwhile are one: time inside C (orjson, pydantic-core, a socket's system calls)
counts for the Python frame that called it, and the event loop's own work in C (uvloop) for the
next Python code it runs, or for uvloop's `run` when it runs the handler itself. About 1-2 % of
the worker's CPU, where cProfile's cost per call made call-heavy code look 5-8x slower.
"""

from __future__ import annotations

import json
import runpy
import signal
import sys
import time
from collections import defaultdict
from types import FrameType

INTERVAL_S = 0.001

Frame = tuple[str, int, str]  # file, first line, function


def main() -> None:
    out = sys.argv.pop(1)
    sys.path.pop(0)  # this script's folder
    stacks: defaultdict[tuple[Frame, ...], float] = defaultdict(float)  # innermost first
    last = 0.0

    def sample(signum: int, frame: FrameType | None) -> None:
        nonlocal last
        now = time.process_time()
        stack = []
        while frame is not None:
            code = frame.f_code
            stack.append((code.co_filename, code.co_firstlineno, code.co_name))
            frame = frame.f_back
        stacks[tuple(stack)] += now - last
        last = now

    def start(signum: int, frame: FrameType | None) -> None:
        nonlocal last
        stacks.clear()
        last = time.process_time()
        signal.setitimer(signal.ITIMER_PROF, INTERVAL_S, INTERVAL_S)

    def stop(signum: int, frame: FrameType | None) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)

    signal.signal(signal.SIGPROF, sample)
    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    try:
        runpy.run_module("jobstream.worker", run_name="__main__", alter_sys=True)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        samples = [{"stack": stack, "cpu_s": cpu} for stack, cpu in stacks.items()]
        with open(out, "w") as file:
            json.dump({"samples": samples}, file)


if __name__ == "__main__":
    main()
