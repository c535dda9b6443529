"""A past commit's code beside this checkout's, for a benchmark that compares the two: a detached
git worktree in a temporary directory, removed afterwards.

A child process runs the anchor's code with its working directory and PYTHONPATH at the tree,
in this checkout's venv: `jobstream/server` and `jobstream/worker` are links to the tree's
top-level folders, so `import jobstream` finds the anchor's package ahead of the editable
install's finder (`code_path` says which file a child really imports).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from jobstream import migrations

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Anchor:
    rev: str  # as asked for
    commit: str  # its full hash
    path: Path  # the worktree
    schema_version: int  # of its schema.sql

    @property
    def short(self) -> str:
        return self.commit[:7]


def child_env(tree: Path, **env: str) -> dict[str, str]:
    """This process's environment for a child that runs `tree`'s code: no JOBSTREAM_* setting
    of ours, PYTHONPATH the tree alone, and `env`."""
    child = {k: v for k, v in os.environ.items() if not k.startswith("JOBSTREAM_")}
    return child | {"PYTHONPATH": str(tree), **env}


def code_path(tree: Path, module: str) -> Path:
    """The file `module` is imported from by a child that runs `tree`'s code."""
    found = subprocess.run(
        [sys.executable, "-c", f"import {module} as m; print(m.__file__)"],
        cwd=tree, env=child_env(tree), capture_output=True, text=True, check=True,
    )  # fmt: skip
    return Path(found.stdout.strip())


@contextmanager
def anchor_tree(rev: str) -> Iterator[Anchor | str]:
    """The anchor's worktree, or why there is none (no git, or no such commit: a shallow clone)."""
    try:
        found = _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except (OSError, subprocess.CalledProcessError):
        yield f"no commit {rev!r} in this repository (a shallow clone?)"
        return
    commit = found.stdout.strip()
    schema = _git("show", f"{commit}:schema.sql").stdout
    with tempfile.TemporaryDirectory(prefix="jobstream-anchor-") as tmp:
        path = Path(tmp) / "tree"
        _git("worktree", "add", "--detach", "--quiet", str(path), commit)
        try:
            # Compiled once here: where PYTHONDONTWRITEBYTECODE is set, every process would
            # compile the tree again at its start. compileall skips linked folders: each named.
            folders = [str(path / name) for name in ("jobstream", "server", "worker")]
            subprocess.run(
                [sys.executable, "-m", "compileall", "-q", "-j", "0", *folders],
                check=False, capture_output=True,
            )  # fmt: skip
            yield Anchor(rev, commit, path, migrations.schema_version(schema))
        finally:
            try:
                _git("worktree", "remove", "--force", str(path))
            except subprocess.CalledProcessError:
                shutil.rmtree(path, ignore_errors=True)
                _git("worktree", "prune")


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
