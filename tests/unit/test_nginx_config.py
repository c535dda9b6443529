"""deploy/nginx/jobstream.conf, rendered as the fleet test renders it, is one nginx accepts
(`nginx -t`), and the rendering changes only the addresses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support import nginx


def test_rendering_changes_only_the_addresses() -> None:
    committed = nginx.CONFIG.read_text()
    copy = nginx.rendered(committed, 1234, [5001, 5002])
    assert nginx.upstream_ports(copy) == [5001, 5002]
    assert "listen 127.0.0.1:1234;" in copy
    changed = set(copy.splitlines()) ^ set(committed.splitlines())
    assert all("server " in line or "listen " in line for line in changed), changed


def test_nginx_accepts_the_rendered_config(tmp_path: Path) -> None:
    if reason := nginx.missing():
        pytest.skip(reason)
    for sub in ("logs", "tmp"):
        (tmp_path / sub).mkdir()
    config = tmp_path / "jobstream.conf"
    config.write_text(nginx.rendered(nginx.CONFIG.read_text(), 1234, [5001, 5002]))
    checked = subprocess.run(
        [str(nginx.BINARY), "-t", "-c", str(config), "-p", f"{tmp_path}/"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert checked.returncode == 0, checked.stderr
