"""The chat example's page at /chat/ (examples/chat/, built by `make chat`): the files of the
folder JOBSTREAM_CHAT_PAGE_DIR names, which `make run` sets. The page is not part of the
package: without the setting, or before the build, /chat/ is a 404 that says how to have it.
"""

from __future__ import annotations

import re
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response

from jobstream.server.problems import not_found
from jobstream.server.state import state

# A file of the folder itself, by a plain name: no path, nothing hidden.
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}")


async def chat_page(request: Request) -> Response:
    return _file(request, "index.html")


async def chat_asset(request: Request) -> Response:
    name: str = request.path_params["name"]
    if not _NAME.fullmatch(name):
        raise not_found(f"No file {name[:40]!r} in the chat page.")
    return _file(request, name)


def _file(request: Request, name: str) -> Response:
    folder = state(request).settings.chat_page_dir
    if not folder:
        raise not_found("The chat example is not served here: `make run` builds and serves it.")
    path = Path(folder) / name
    if not path.is_file():
        # Not the folder's path: where the server's files are is not the client's business.
        raise not_found(f"No file {name!r} in the chat page: build it with `make chat`.")
    # Rebuilt by make chat while the server runs: asked again every time, answered 304 as is.
    return FileResponse(path, headers={"Cache-Control": "no-cache"})
