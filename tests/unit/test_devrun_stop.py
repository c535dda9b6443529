"""devrun's stop of its children: a second Ctrl-C always reaches them as SIGINT."""

from __future__ import annotations

import subprocess
import sys
import time

from jobstream.devrun import Stop, _stop_children

# A child like the worker under a long grace period: SIGTERM starts a wait it would sit out,
# SIGINT ends it at once. It prints "ready" once both handlers are in place.
CHILD = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: None)
signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
print("ready", flush=True)
time.sleep(600)
"""


def test_a_second_request_made_before_the_stop_begins_still_sends_sigint() -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        stop = Stop()
        # Both Ctrl-Cs arrive while the supervisor is still printing its stopping message.
        stop.request("SIGINT")
        stop.request("SIGINT")
        started = time.monotonic()
        _stop_children({"worker": child}, stop, grace=120)
        assert child.returncode == 0
        assert time.monotonic() - started < 10  # far inside the 120 s grace
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        assert child.stdout is not None
        child.stdout.close()
