"""A real nginx in front of the fleet's servers, on deploy/nginx/jobstream.conf.

The test renders a copy of the committed configuration with only what must change replaced (the
upstream servers' addresses and the port it listens on) and runs `nginx -c COPY -p PREFIX` as
its own child, in the foreground (the config says `daemon off;`), with its logs and temp files
under PREFIX: never the package's service. As root, its workers run as root (`-g "user root;"`),
so they can write the prefix the test made.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import time
from pathlib import Path

import httpx

from tests.support.fleet_topology import NGINX_CONFIG, nginx_command
from tests.support.processes import REPO_ROOT

BINARY = Path("/usr/sbin/nginx")
CONFIG = REPO_ROOT / NGINX_CONFIG
START_TIMEOUT_S = 10.0
_UPSTREAM_SERVER = re.compile(r"^(\s*)server [\w.-]+:(\d+)( [^;]*)?;.*\n", re.MULTILINE)
_LISTEN = re.compile(r"^(\s*)listen [^;\n]+;", re.MULTILINE)


def missing() -> str | None:
    """Why nginx cannot run here (for a skip), or None."""
    if not BINARY.exists():
        return f"{BINARY} is not installed (`make nginx` installs Debian's package)"
    return None


def upstream_ports(config: str) -> list[int]:
    """The ports of the upstream servers a configuration names."""
    return [int(port) for _, port, _ in _UPSTREAM_SERVER.findall(config)]


def rendered(config: str, port: int, upstreams: list[int]) -> str:
    """The committed configuration listening on 127.0.0.1:`port`, in front of servers on
    127.0.0.1's `upstreams`."""
    servers = _UPSTREAM_SERVER.findall(config)
    if len(servers) < 1 or len(_LISTEN.findall(config)) != 1:
        raise ValueError(f"{CONFIG} has no upstream servers or not one listen line")
    indent, _, parameters = servers[0]  # the first server's, kept for each: max_fails and such
    lines = "".join(f"{indent}server 127.0.0.1:{p}{parameters};\n" for p in upstreams)
    first = True

    def replace(match: re.Match[str]) -> str:
        nonlocal first
        if first:
            first = False
            return lines
        return ""

    listen = rf"\g<1>listen 127.0.0.1:{port};"
    return _LISTEN.sub(listen, _UPSTREAM_SERVER.sub(replace, config))


class Nginx:
    """nginx on `port` in front of `upstreams`, its files under `prefix`."""

    def __init__(self, prefix: Path, port: int, upstreams: list[int]) -> None:
        self.port = port
        self.prefix = prefix
        for sub in ("logs", "tmp"):
            (prefix / sub).mkdir(parents=True, exist_ok=True)
        self.config = prefix / "jobstream.conf"
        self.config.write_text(rendered(CONFIG.read_text(), port, upstreams))
        argv = nginx_command(str(self.config), f"{prefix}/")
        argv[0] = str(BINARY)
        if os.geteuid() == 0:
            argv += ["-g", "user root;"]
        self._out = (prefix / "logs" / "stderr.log").open("wb")
        self.popen = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=self._out, stderr=subprocess.STDOUT
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def error_log(self) -> str:
        path = self.prefix / "logs" / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    async def ready(self) -> None:
        """Until nginx answers (any status: the servers may not be up yet)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        async with httpx.AsyncClient(base_url=self.url, timeout=2) as client:
            while True:
                if self.popen.poll() is not None:
                    raise RuntimeError(f"nginx exited {self.popen.returncode}: {self.error_log()}")
                try:
                    await client.get("/healthz")
                    return
                except httpx.TransportError as exc:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"nginx did not answer: {exc}") from exc
                await asyncio.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM (nginx's fast stop: the test is over); killed if it lingers."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(5)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        self._out.close()
