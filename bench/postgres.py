"""The benchmarks' PostgreSQL: DATABASE_URL when set, else an embedded one with fsync on."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jobstream.embedded_pg import EmbeddedPostgres


@contextmanager
def durable_postgres(prefix: str) -> Iterator[str]:
    """Yield an admin URL. Durable (fsync on), as in production: the figures mean nothing
    without it. A DATABASE_URL server must allow CREATE DATABASE."""
    external = os.environ.get("DATABASE_URL")
    if external:
        yield external
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        server = EmbeddedPostgres(Path(tmp) / "data", durable=True)
        server.start()
        try:
            yield server.url
        finally:
            server.destroy()
