"""`python -m tests.support.few_files`: a program started with a low soft open-file limit, as on a
machine whose default is 1,024 (here $FEW_FILES), for tests/e2e/test_server_connections.py.

$FEW_FILES_RUN says which program:
- `server`: `python -m server` itself, from its main();
- `asyncio-http`: a bare uvicorn on asyncio's own event loop, on $JOBSTREAM_PORT, logging through
  jobstream.logs. `python -m server` runs on uvloop, whose accept loop (libuv's) meets EMFILE
  quietly; asyncio's logs a traceback for every failed accept and retries at once.
"""

from __future__ import annotations

import os
import resource
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from jobstream import logs


async def ok(request: Request) -> Response:
    return PlainTextResponse("ok")


def main() -> int:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(os.environ["FEW_FILES"]), hard))
    program = os.environ["FEW_FILES_RUN"]
    if program == "server":
        from jobstream.server.__main__ import main as server_main

        return server_main()
    if program == "asyncio-http":
        logs.configure("info", json=True)
        app = Starlette(routes=[Route("/", ok)])
        port = int(os.environ["JOBSTREAM_PORT"])
        uvicorn.Server(uvicorn.Config(app, port=port, loop="asyncio", log_config=None)).run()
        return 0
    print(f"unknown FEW_FILES_RUN={program!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
