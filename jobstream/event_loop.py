"""The running event loop, found without a system call.

On Python 3.11, asyncio.get_running_loop() calls getpid() on every call (a check against a
forked child using its parent's loop; Python 3.12 dropped it), and since glibc 2.25 that is a
real system call (strace -c: 100,000 calls, 100,006 getpid), 0.2 µs on an idle machine. A worker
streaming 1,000 jobs asked for its loop 100,000 times a second (a pacer sleep per token, a due
time per chunk, a future per token write): about 2 % of a core, and a point where a busy
machine takes the core away. (py-spy put 28 % of that worker's samples on those lines, but on
a saturated machine it counts a process waiting for a core too; the worker's CPU a delta, from
/proc, moved by less than the noise between runs.)

Here the loop is kept per thread and asked again only when the one kept is no longer running
(the thread has since started another). A loop runs in one thread at a time, so a kept loop that
is running is the calling thread's. Our processes never fork inside a running loop, the case the
getpid check was for.
"""

from __future__ import annotations

import asyncio
import threading


class _Kept(threading.local):
    loop: asyncio.AbstractEventLoop | None = None


_kept = _Kept()


def running_loop() -> asyncio.AbstractEventLoop:
    """asyncio.get_running_loop(), at the cost of an attribute read; RuntimeError likewise when
    no loop runs in this thread."""
    loop = _kept.loop
    if loop is None or not loop.is_running():
        loop = _kept.loop = asyncio.get_running_loop()
    return loop
