"""jobstream as a dependency of the user's project: the wheel, installed (not editable) into a
fresh virtualenv outside the repository, beside an app directory of the user's own that has
modules named `server.py` and `worker.py`. From there: `jobstream migrate` on an empty database,
`jobstream server` and `jobstream worker` with JOBSTREAM_APP, and a job of that app to its end.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.database import create_empty_database, drop_test_database
from tests.support.polling import eventually
from tests.support.processes import REPO_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

UV = Path(sys.executable).parent / "uv"

APP = '''
"""The user's jobs. `server` and `worker` here are the user's own modules."""
import jobstream
from pydantic import BaseModel

import server
import worker

app = jobstream.App()


class Name(BaseModel):
    name: str


@app.job("greet", input=Name)
async def greet(asked: Name, ctx: jobstream.Context) -> None:
    await ctx.progress(0.5, "greeting")
    await ctx.emit(f"{server.GREETING}, {asked.name}! {worker.SIGNATURE}")
'''


def _run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, f"{command}: {done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A virtualenv outside the repository with the jobstream wheel installed; its bin/."""
    root = tmp_path_factory.mktemp("installed")
    # The build reads a copy: building in the checkout leaves build/ and egg-info behind.
    source = root / "source"
    shutil.copytree(
        REPO_ROOT,
        source,
        symlinks=True,
        # Nor the chat example's node_modules (.cache), nor the tests' logs: not in a wheel.
        ignore=shutil.ignore_patterns(
            ".git", ".venv", ".data", ".cache", "test-output", "build", "__pycache__", "*.egg-info"
        ),
    )
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "-q",
        "-w",
        root / "dist",
        source,
        cwd=root,
    )
    [wheel] = (root / "dist").glob("jobstream-*.whl")
    venv = root / "venv"
    _run(UV, "venv", "-q", venv, "--python", sys.executable, cwd=root)
    # Compiled, as pip installs by default: where PYTHONDONTWRITEBYTECODE is set (this machine),
    # uncompiled modules are compiled again at every start, 8 s of a server's on a busy machine.
    _run(
        UV, "pip", "install", "-q", "--compile-bytecode", "--python", venv / "bin" / "python",
        wheel, cwd=root,
    )  # fmt: skip
    yield venv / "bin"


async def test_an_installed_wheel_migrates_serves_and_runs_the_users_jobs(
    installed: Path, admin_url: str, tmp_path: Path
) -> None:
    app_dir = tmp_path / "myproject"
    app_dir.mkdir()
    (app_dir / "myjobs.py").write_text(textwrap.dedent(APP))
    (app_dir / "server.py").write_text('GREETING = "Hello"\n')
    (app_dir / "worker.py").write_text('SIGNATURE = "(from the user\'s worker.py)"\n')
    python = installed / "python"
    # Not editable and not the checkout: the package comes from the virtualenv.
    where = _run(python, "-c", "import jobstream; print(jobstream.__file__)", cwd=app_dir)
    assert where.startswith(str(installed.parent)), where
    # The price catalogue is package data: every process prices with it from its start.
    priced = _run(
        python,
        "-c",
        "from jobstream import prices; print(prices.load().price_of('openai', 'gpt-4o').source)",
        cwd=app_dir,
    )
    assert priced.strip() == "catalogue", priced
    database_url = await create_empty_database(admin_url)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        "PATH": f"{installed}:/usr/bin:/bin",
        "DATABASE_URL": database_url,
        "JOBSTREAM_APP": "myjobs:app",
        "JOBSTREAM_PORT": str(port),
        "JOBSTREAM_LOG_JSON": "true",
    }
    processes: list[asyncio.subprocess.Process] = []
    try:
        said = _run(installed / "jobstream", "migrate", cwd=app_dir, env=env)
        assert "schema version" in said
        for command in ("server", "worker"):
            with (tmp_path / f"{command}.log").open("wb") as log:
                processes.append(
                    await asyncio.create_subprocess_exec(
                        installed / "jobstream",
                        command,
                        cwd=app_dir,
                        env=env,
                        stdout=log,
                        stderr=log,
                    )
                )
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:

            async def types() -> list[str]:
                try:
                    answer = await client.get("/api/job-types")
                except httpx.TransportError:
                    return []
                return [t["name"] for t in answer.json()["jobs"]]

            # Generous: a server starts in 8 s or more on a busy machine.
            await eventually(
                types, lambda names: "greet" in names, what="the server is up", timeout_s=60
            )
            created = await client.post(
                "/api/jobs", json={"job": "greet", "input": {"name": "Ada"}}
            )
            assert created.status_code == 202, created.text
            job_id = created.json()["id"]

            async def job() -> dict[str, object]:
                answer: dict[str, object] = (await client.get(f"/api/jobs/{job_id}")).json()
                return answer

            done = await eventually(
                job, lambda j: j["status"] == "succeeded", what="succeeded", timeout_s=60
            )
            page = await client.get("/")
            assert page.status_code == 200 and "jobstream" in page.text
        assert done["result"]["text"] == "Hello, Ada! (from the user's worker.py)"  # type: ignore[index]
    finally:
        for process in processes:
            process.terminate()
        async with asyncio.timeout(30):
            for process in processes:
                await process.wait()
        await drop_test_database(admin_url, database_url)
    for command in ("server", "worker"):
        assert "Traceback" not in (tmp_path / f"{command}.log").read_text(), command
