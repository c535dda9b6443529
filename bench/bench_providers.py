"""Token throughput of one worker process at full speed on each provider's loopback fake, beside
the OpenAI path of an anchor commit: issue 35 asks the official SDKs' paths to keep at least 0.8x
of the hand-written OpenAI client's throughput.

    .venv/bin/python -m bench.bench_providers [--repeats 3] [--anchor REV] [--profile]
    (`make bench` runs every benchmark; `make bench-providers BENCH_ARGS="--repeats 1"` this one)

Sides, interleaved (anchor, openai, anthropic, anchor, ...) so that a drift of the machine lands
on each alike:
- `anchor openai`: the worker of commit --anchor (default 5a6ae60, the last before the anthropic
  provider: its OpenAI path is the hand-written httpx client), from a detached worktree
  (bench/anchor_tree.py), on the OpenAI fake;
- `openai`, `anthropic`: this checkout's worker, on each provider's fake.

A case: a fresh database holding --jobs jobs of the built-in prompt-to-model job (one prompt, a
`provider` each), one worker process with as many slots, and every fake answer --tokens tokens
as fast as it can be read (bench/provider_fakes.py, a process of its own, so its CPU is not the
worker's). 100 streams by default: the hand-written client is an httpx.AsyncClient with httpx's
default pool, 100 connections, and a stream beyond those waits for one (and fails with a
PoolTimeout after JOBSTREAM_OPENAI_CONNECT_TIMEOUT_S); the SDKs' clients allow 1,000.
Each answer is on the worker's socket at once, so a stream's deltas coalesce into a couple of
token events (the log's writes cost little here) and the figures are the provider's path: HTTP,
server-sent events, chunks, deltas. Figures per side, min / median / max over the repeats:
- tokens/s: the tokens of the succeeded attempts (the usage the fake reports) over the time from
  the first claim to the last job's end, by the database's clock;
- the worker process's CPU (user + system, /proc/<pid>/stat) from before the jobs were created
  to after the last ended, in ms per 1,000 tokens (µs a token), and its busy share of a core.
Then each median against the anchor's, both as "higher is better": tokens/s, and tokens a
second of the worker's CPU (the anchor's CPU a token over the side's). The second holds when
other processes share the cores: they take the worker's turns (its busy share drops, and its
tokens/s with it) more than they change its CPU a token. Uses DATABASE_URL when set (it must
allow CREATE DATABASE), else an embedded PostgreSQL with fsync on. Figures are printed, never
asserted.

--profile adds one run per side with the worker's stack sampled every millisecond of its CPU
(bench/sampled_worker.py) and prints where its CPU went, in µs a token: by package, by function,
and by function with what it calls.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import orjson

from bench import queue_common as common
from bench.anchor_tree import ROOT, Anchor, anchor_tree, child_env, code_path
from bench.postgres import durable_postgres
from jobstream import creates, db, logs, migrations
from jobstream.jobspec import JobSpec
from jobstream.new_jobs import Created, NewJob
from jobstream.settings import Settings
from jobstream.worker.providers.base import ProviderRequest
from jobstream.worker.providers.registry import build_providers, close_providers
from tests.support import anthropic_jobs, openai_jobs
from tests.support.fake_openai import expected_text

# The commit before the anthropic provider: its worker's OpenAI path is the hand-written client.
DEFAULT_ANCHOR = "5a6ae60"
# Words of ordinary length: the fakes answer with the prompt's words, one a token.
PROMPT = "explain how a durable queue keeps every streamed token of a job"
POLL_S = 0.1
CASE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Side:
    name: str
    provider: str
    tree: Path  # whose code the worker runs
    env: dict[str, str]  # the provider's settings
    # The anchor's database is made by its own migrate when its schema differs from ours.
    own_migrate: bool = False


@dataclass(frozen=True)
class Case:
    tokens: int  # of the succeeded attempts
    seconds: float  # first claim -> last end
    worker_cpu_s: float
    fake_cpu_s: float
    events: int  # token events persisted (each a flush of several deltas)
    good: int  # jobs that succeeded with the whole text
    jobs: int
    cpu_window_s: float  # the wall time over which worker_cpu_s was counted

    @property
    def busy(self) -> float:
        """The worker's share of a core meanwhile: near 1, its CPU sets the pace."""
        return self.worker_cpu_s / self.cpu_window_s

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds

    @property
    def cpu_per_k(self) -> float:
        return self.worker_cpu_s / self.tokens * 1000


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_providers")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side (3)")
    parser.add_argument("--jobs", type=int, default=100, help="concurrent streams (100)")
    parser.add_argument("--tokens", type=int, default=1000, help="tokens a stream (1,000)")
    parser.add_argument(
        "--anchor", default=DEFAULT_ANCHOR, help=f"the commit to compare with ({DEFAULT_ANCHOR})"
    )
    parser.add_argument(
        "--profile", action="store_true", help="and a run per side with the worker sampled"
    )
    parser.add_argument(
        "--live-fakes", action="store_true", help="serve from the fakes themselves (slow)"
    )
    args = parser.parse_args([] if argv is None else argv)
    logs.configure("warning", json=False)
    with durable_postgres("jobstream-bench-") as admin_url, anchor_tree(args.anchor) as anchor:
        asyncio.run(_run(admin_url, anchor, args))


async def _run(admin_url: str, anchor: Anchor | str, args: argparse.Namespace) -> None:
    print(
        f"bench_providers: one worker process, {args.jobs} streams x {args.tokens:,} tokens at"
        f" full speed on each provider's loopback fake, {args.repeats} runs a side, interleaved"
        f" ({_load()})"
    )
    async with _fakes(args.tokens, live=args.live_fakes) as (fake_pid, urls):
        sides = _sides(anchor, urls)
        for side in sides:
            module = f"jobstream.worker.providers.{side.provider}"
            print(f"  {side.name}: worker code {code_path(side.tree, module)}")
        cases: dict[str, list[Case]] = {side.name: [] for side in sides}
        for repeat in range(args.repeats):
            for side in list(sides):
                try:
                    case = await _case(admin_url, side, fake_pid, args.jobs, args.tokens)
                except Exception as exc:
                    if side.tree == ROOT:
                        raise
                    # Old code in today's venv and schema: its failure ends its side only.
                    print(f"  {side.name} dropped: {type(exc).__name__}: {exc}")
                    sides.remove(side)
                    del cases[side.name]
                    continue
                cases[side.name].append(case)
                _print_case(repeat, args.repeats, side, case)
        _print_summary(sides, cases, live=args.live_fakes)
        if args.profile:
            with tempfile.TemporaryDirectory(prefix="jobstream-profile-") as tmp:
                for side in sides:
                    out = Path(tmp) / f"{side.name.replace(' ', '-')}.prof"
                    case = await _case(admin_url, side, fake_pid, args.jobs, args.tokens, out)
                    _print_profile(side, case, out)


def _sides(anchor: Anchor | str, urls: dict[str, str]) -> list[Side]:
    openai_env = {
        "JOBSTREAM_OPENAI_BASE_URL": urls["openai"],
        "JOBSTREAM_OPENAI_API_KEY": openai_jobs.KEY,
        "JOBSTREAM_OPENAI_MODEL": "fake-model",
    }
    anthropic_env = {
        "JOBSTREAM_ANTHROPIC_BASE_URL": urls["anthropic"],
        "JOBSTREAM_ANTHROPIC_API_KEY": anthropic_jobs.KEY,
        "JOBSTREAM_ANTHROPIC_MODEL": "claude-test-model",
    }
    sides = []
    if isinstance(anchor, str):
        print(f"  anchor side skipped: {anchor}")
    else:
        ours = migrations.schema_version(migrations.load_schema())
        own = anchor.schema_version != ours
        name = f"anchor {anchor.short} openai"
        sides.append(Side(name, "openai", anchor.path, openai_env, own_migrate=own))
    sides.append(Side("openai", "openai", ROOT, openai_env))
    sides.append(Side("anthropic", "anthropic", ROOT, anthropic_env))
    return sides


# --- one case ---


async def _case(
    admin_url: str,
    side: Side,
    fake_pid: int,
    jobs: int,
    tokens: int,
    profile: Path | None = None,
) -> Case:
    name = f"bench_prov_{uuid.uuid4().hex[:10]}"
    url = await common.recreate_database(admin_url, name)
    try:
        await _prepare(url, side)
        worker = await _spawn_worker(side, url, jobs, profile)
        alive = common.check_alive([worker])
        pool = await common.create_pool(url, 2)
        try:
            await _until_registered(pool, worker.pid, alive)
            worker_cpu, fake_cpu = _cpu_seconds(worker.pid), _cpu_seconds(fake_pid)
            started = time.monotonic()
            if profile is not None:
                worker.send_signal(signal.SIGUSR1)  # sample from here on
            await _create_jobs(pool, side.provider, jobs, tokens)

            async def unfinished() -> int:
                left: int = await pool.fetchval(
                    "SELECT count(*) FROM jobs WHERE finished_at IS NULL"
                )
                return left

            await common.poll_until_zero(
                unfinished, side.name, timeout_s=CASE_TIMEOUT_S, alive=alive
            )
            if profile is not None:
                worker.send_signal(signal.SIGUSR2)
            worker_cpu = _cpu_seconds(worker.pid) - worker_cpu
            fake_cpu = _cpu_seconds(fake_pid) - fake_cpu
            window = time.monotonic() - started
            return await _figures(pool, tokens, worker_cpu, fake_cpu, window)
        finally:
            await pool.close()
            await common.stop(worker)
    finally:
        await common.drop_database(admin_url, name)


async def _prepare(url: str, side: Side) -> None:
    if side.own_migrate:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "jobstream.migrate", cwd=side.tree,
            env=child_env(side.tree, DATABASE_URL=url), stdout=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        if await process.wait():
            raise RuntimeError(f"{side.name}: its migrate failed")
    conn = await db.connect(url)
    try:
        if not side.own_migrate:
            await migrations.apply_schema(conn)
        # The default tenant may run 16 jobs at once: the figures are about streams, not that.
        await conn.execute("UPDATE tenants SET max_running = 10000")
    finally:
        await conn.close()


async def _spawn_worker(
    side: Side, url: str, jobs: int, profile: Path | None
) -> asyncio.subprocess.Process:
    env = child_env(
        side.tree,
        DATABASE_URL=url,
        JOBSTREAM_LOG_LEVEL="warning",
        JOBSTREAM_WORKER_CONCURRENCY=str(jobs),
        JOBSTREAM_PROVIDER_CONCURRENCY="",  # no provider's limit: one slot a job
        **side.env,
    )
    command = ["-m", "jobstream.worker"]
    if profile is not None:
        command = [str(Path(__file__).with_name("sampled_worker.py")), str(profile)]
    return await asyncio.create_subprocess_exec(sys.executable, *command, cwd=side.tree, env=env)


async def _until_registered(
    pool: asyncpg.Pool, pid: int, alive: Callable[[], None], timeout_s: float = 60
) -> None:
    """Until the worker has started (its row is written after its start-up), then a moment for
    its first claim and janitor rounds: the CPU counted from then on is the jobs'."""
    deadline = time.monotonic() + timeout_s
    query = "SELECT count(*) FROM workers WHERE pid = $1 AND stopped_at IS NULL"
    while not await pool.fetchval(query, pid):
        alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the worker did not start within {timeout_s:g} s")
        await asyncio.sleep(POLL_S)
    await asyncio.sleep(0.5)


async def _create_jobs(pool: asyncpg.Pool, provider: str, jobs: int, tokens: int) -> None:
    """`jobs` jobs in one statement, each with the reservation a server would make."""
    # max_tokens above what the fake sends: every answer ends on its own (stop, end_turn), none
    # is cut at the limit.
    spec = JobSpec(prompt=PROMPT, provider=provider, max_tokens=tokens + 1)
    providers = build_providers(Settings())
    try:
        request = ProviderRequest(prompt=PROMPT, model=None, max_tokens=spec.max_tokens, attempt=1)
        reserved = providers[provider].estimate_cost(request, spec.max_tokens)
    finally:
        await close_providers(providers)
    outcomes = await creates.create_many(
        pool, "default", [NewJob(spec, None, reserved) for _ in range(jobs)]
    )
    refused = [outcome for outcome in outcomes if not isinstance(outcome, Created)]
    if refused:
        raise RuntimeError(f"{len(refused)} creates refused: {refused[0]!r}")


async def _figures(
    pool: asyncpg.Pool, tokens: int, worker_cpu: float, fake_cpu: float, window: float
) -> Case:
    row = await pool.fetchrow(
        "SELECT count(*) AS jobs,"
        " count(*) FILTER (WHERE status = 'succeeded' AND result->>'text' = $1) AS good,"
        " extract(epoch FROM max(finished_at) - min(started_at))::float8 AS seconds"
        " FROM jobs",
        expected_text(PROMPT, tokens),
    )
    assert row is not None
    if row["good"] != row["jobs"]:
        bad = await pool.fetchrow(
            "SELECT status, error, length(result->>'text') AS chars FROM jobs"
            " WHERE status <> 'succeeded' OR result->>'text' <> $1 LIMIT 1",
            expected_text(PROMPT, tokens),
        )
        print(f"    {row['jobs'] - row['good']} jobs did not succeed with the fake's text: {bad}")
    succeeded_tokens = await pool.fetchval(
        "SELECT coalesce(sum(output_tokens), 0) FROM job_attempts WHERE outcome = 'succeeded'"
    )
    if not succeeded_tokens:
        raise RuntimeError("no job succeeded")
    events = await pool.fetchval("SELECT count(*) FROM job_events WHERE type = 'token'")
    return Case(
        succeeded_tokens, row["seconds"], worker_cpu, fake_cpu, events, row["good"], row["jobs"],
        window,
    )  # fmt: skip


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (/proc/<pid>/stat's utime and stime)."""
    # The fields after the command name, which is in parentheses and may hold spaces: utime
    # and stime are the 14th and 15th of the line, the 12th and 13th of these.
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- the fakes ---


@asynccontextmanager
async def _fakes(tokens: int, *, live: bool) -> AsyncIterator[tuple[int, dict[str, str]]]:
    """The fakes' process (bench/provider_fakes.py): its pid and the base URLs to give workers."""
    process = await common.spawn(
        "bench.provider_fakes", "--tokens", str(tokens), *(["--live"] if live else []),
        env={}, pipes=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        if not line:
            raise RuntimeError("the fakes' process exited before it served")
        urls: dict[str, str] = orjson.loads(line)
        yield process.pid, urls
    finally:
        await common.stop(process)


# --- figures ---


def _print_case(repeat: int, repeats: int, side: Side, case: Case) -> None:
    print(
        f"  run {repeat + 1}/{repeats} {side.name:>20}: {case.rate:9,.0f} tokens/s"
        f" ({case.tokens:,} in {case.seconds:.2f} s), worker CPU {case.cpu_per_k * 1000:6.1f} ms"
        f" a 1k tokens (busy {case.busy:.0%}), {case.events:,} token events,"
        f" {case.good}/{case.jobs} jobs whole"
    )


def _print_summary(sides: list[Side], cases: dict[str, list[Case]], *, live: bool) -> None:
    anchor = next((side for side in sides if side.tree != ROOT), None)
    print(
        f"  {'':>20}  {'tokens/s  min / median / max':>32}  {'worker CPU ms a 1k tokens':>28}"
        + ("  vs anchor: tokens/s, tokens a CPU second" if anchor is not None else "")
    )
    medians = {
        name: (
            statistics.median(c.rate for c in runs),
            statistics.median(c.cpu_per_k for c in runs),
        )
        for name, runs in cases.items()
    }
    for side in sides:
        runs = cases[side.name]
        rates = sorted(c.rate for c in runs)
        cpus = sorted(c.cpu_per_k * 1000 for c in runs)
        line = (
            f"  {side.name:>20}  {rates[0]:8,.0f} / {medians[side.name][0]:8,.0f} /"
            f" {rates[-1]:8,.0f}  {cpus[0]:7.1f} / {medians[side.name][1] * 1000:6.1f} /"
            f" {cpus[-1]:6.1f}"
        )
        if anchor is not None:
            rate, cpu = medians[anchor.name]
            line += f"  {medians[side.name][0] / rate:10.2f}x, {cpu / medians[side.name][1]:.2f}x"
        print(line)
    fake = [c.fake_cpu_s / c.tokens * 1e6 for runs in cases.values() for c in runs]
    print(
        f"  the fakes' process: {statistics.median(fake):.1f} µs of CPU a token (median)"
        + (", serving from the fakes themselves" if live else ", replaying each fake's answer")
        + f"; {_load()}"
    )


def _load() -> str:
    """Other processes' CPU lands in the figures: the worker's busy share and tokens/s drop
    first, its CPU a token less."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} / {five:.1f} on {os.cpu_count()} cores"


def _print_profile(side: Side, case: Case, path: Path) -> None:
    """Where the worker's CPU went, per token (bench/sampled_worker.py's samples)."""
    sampled = orjson.loads(path.read_bytes())["samples"]
    per_token = 1e6 / case.tokens  # µs a token for a second of CPU
    own: Counter[tuple[str, str]] = Counter()
    within: Counter[tuple[str, str]] = Counter()
    areas: Counter[str] = Counter()
    for sample in sampled:
        stack = [(_short(file), f"{function}:{line}") for file, line, function in sample["stack"]]
        cpu = sample["cpu_s"]
        if stack:
            own[stack[0]] += cpu
            areas[_area(stack[0][0])] += cpu
        for frame in set(stack):
            within[frame] += cpu
    total = sum(areas.values())
    print(
        f"  where {side.name}'s worker spends its CPU, µs a token ({case.rate:,.0f} tokens/s"
        f" sampled; {case.cpu_per_k * 1000:.1f} µs a token by /proc, {total * per_token:.1f}"
        " sampled):"
    )
    print("    own time by package: " + ", ".join(
        f"{area} {cpu * per_token:.1f}" for area, cpu in areas.most_common(10)
    ))  # fmt: skip
    print("    own time:")
    for (file, function), cpu in own.most_common(12):
        print(f"      {cpu * per_token:6.2f}  {file} {function}")
    print("    with what it calls:")
    shown = 0
    for (file, function), cpu in within.most_common():
        # Frames under every sample: the start's, the loop's.
        if file.startswith(("asyncio/", "runpy", "uvloop/", "<")) or file.endswith(
            ("__main__.py", "sampled_worker.py")
        ):
            continue
        print(f"      {cpu * per_token:6.2f}  {file} {function}")
        shown += 1
        if shown == 20:
            break


def _short(file: str) -> str:
    """A code file as a reader names it: from the package's folder on, or the checkout's."""
    for marker in ("site-packages/", f"python{sys.version_info[0]}.{sys.version_info[1]}/"):
        if marker in file:
            return file.split(marker, 1)[1]
    parts = Path(file).parts
    if "jobstream" in parts:
        return "/".join(parts[parts.index("jobstream") :])
    return file


def _area(file: str) -> str:
    """A package, or one of jobstream's modules."""
    if file.startswith("jobstream/"):
        return file.removeprefix("jobstream/")
    return file.split("/")[0].removesuffix(".py")


if __name__ == "__main__":
    main(sys.argv[1:])
