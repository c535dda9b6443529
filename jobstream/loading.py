"""Finding the user's app: `JOBSTREAM_APP=package.module:app`, imported once at start-up.

Both processes read the same definitions (jobstream/app.py): the server to validate a create's
input and publish its schemas, the worker to know which names it claims and what runs each.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from jobstream.app import App
from jobstream.errors import JobstreamError


class AppNotFound(JobstreamError):
    """JOBSTREAM_APP names nothing importable, or not an App."""


def load_app(target: str | None) -> App:
    """The App `target` names (`package.module:attribute`); an empty one for None."""
    if target is None:
        return App()
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise AppNotFound(f"JOBSTREAM_APP={target!r}: give it as package.module:app")
    # As `python -m` and uvicorn do: the working directory's modules come first.
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AppNotFound(f"JOBSTREAM_APP={target!r}: cannot import {module_name}: {exc}") from exc
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise AppNotFound(
            f"JOBSTREAM_APP={target!r}: {module_name}.{attribute} is "
            f"{type(app).__name__}, not a jobstream.App"
        )
    return app
