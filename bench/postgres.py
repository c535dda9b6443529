"""The benchmarks' PostgreSQL: DATABASE_URL when set, else an embedded one with fsync on."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jobstream.embedded_pg import EmbeddedPostgres

# Sized as for a server in service, not as the tests' clusters are (64 MB): 1 GB, below the
# quarter of the memory PostgreSQL's documentation suggests as a start (this machine has 24 GiB).
# A queue that grows to half a million jobs outgrows 64 MB: then every claim and update reads
# its pages back from the kernel, and writes out others', a cost of the set-up and not of
# either queue. Both sides of a comparison run on the one cluster.
SHARED_BUFFERS = "1GB"


@contextmanager
def durable_postgres(prefix: str) -> Iterator[str]:
    """Yield an admin URL. Durable (fsync on), as in production: the figures mean nothing
    without it. A DATABASE_URL server must allow CREATE DATABASE."""
    external = os.environ.get("DATABASE_URL")
    if external:
        yield external
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        server = EmbeddedPostgres(Path(tmp) / "data", durable=True, shared_buffers=SHARED_BUFFERS)
        server.start()
        try:
            yield server.url
        finally:
            server.destroy()
