"""`python -m tests.support.fake_openai [--port N] [--api-key K]`: serve the fake from its own
process. Prints `{"url": ..., "base_url": ...}` on its first line and serves until SIGTERM or
SIGINT."""

from __future__ import annotations

import argparse
import signal
import threading

import orjson

from tests.support.fake_openai.server import FakeOpenAI


def main() -> None:
    parser = argparse.ArgumentParser(description="Fake OpenAI-compatible server for tests.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--api-key", default=None)
    args = parser.parse_args()
    fake = FakeOpenAI(api_key=args.api_key, port=args.port)
    fake.start()
    print(orjson.dumps({"url": fake.url, "base_url": fake.base_url}).decode(), flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(0.2):
        pass
    fake.stop()


if __name__ == "__main__":
    main()
