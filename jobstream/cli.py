"""`jobstream`: submit (one or a batch), follow, read, list, cancel and retry jobs.

`jobstream submit PROMPT` makes the built-in job; `jobstream submit --job NAME --input JSON` (or
`--input @file.json`) one of the jobs an app registered.
`jobstream tenants create|rotate-key|revoke-key` works on DATABASE_URL's database, not through a
server (jobstream.tenants).

Exit codes: 0 the job succeeded (or the request was done); 1 the job ended without success
(failed, dead, cancelled); 2 the request was refused (unknown job, invalid input); 3 the server
could not be reached; 130 interrupted (a follow says how to resume). Built on jobstream.client.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import orjson

from jobstream.client import DEFAULT_URL, AsyncClient, Refused, Reset, Result, Text, Unreachable
from jobstream.client import Progress as JobProgress
from jobstream.ctrl_c import Interrupted, Progress, on_ctrl_c
from jobstream.progress_bar import ProgressDisplay

EXIT_OK, EXIT_JOB_FAILED, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
BATCH_SIZE = 1000  # the most POST /api/jobs/batch takes
# How `get` shows an operator's retry, which is a new job linked both ways.
LINKS = (("retry of", "retry_of"), ("retried as", "retried_as"))


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url",
        default=os.environ.get("JOBSTREAM_URL", DEFAULT_URL),
        help=f"server base URL (default: $JOBSTREAM_URL or {DEFAULT_URL})",
    )
    common.add_argument(
        "--api-key",
        default=os.environ.get("JOBSTREAM_API_KEY"),
        help="sent as `Authorization: Bearer <key>` (default: $JOBSTREAM_API_KEY)",
    )
    common.add_argument("--json", action="store_true", help="machine output: JSON lines")
    top = argparse.ArgumentParser(prog="jobstream", description=__doc__.split("\n")[0])
    commands = top.add_subparsers(dest="command", required=True)

    # The processes, from an installed jobstream: configured by the environment (DATABASE_URL,
    # JOBSTREAM_APP, JOBSTREAM_*), as `python -m jobstream.server` and the like.
    for name, says in _PROCESSES.items():
        commands.add_parser(name, help=says)
    # Run against DATABASE_URL, not the server: main() hands its arguments to jobstream.tenants.
    commands.add_parser(
        "tenants",
        help="tenants and their API keys: create, rotate-key, revoke-key (--help for more)",
        add_help=False,
    )

    submit = commands.add_parser("submit", parents=[common], help="create a job")
    what = submit.add_mutually_exclusive_group(required=True)
    what.add_argument("prompt", nargs="?", help="the built-in job's prompt")
    what.add_argument("--job", metavar="NAME", help="a job the app registered, by name")
    submit.add_argument(
        "--input",
        type=_json_input,
        metavar="JSON",
        help="with --job: its input, a JSON object, or @FILE to read it from a file",
    )
    submit.add_argument("--follow", "-f", action="store_true", help="stream its output")
    submit.add_argument("--provider")
    submit.add_argument("--model")
    submit.add_argument("--max-tokens", type=int)
    submit.add_argument("--max-attempts", type=int)
    submit.add_argument("--priority", type=int)
    submit.add_argument("--timeout", type=float, dest="timeout_s")
    submit.add_argument(
        "--simulate",
        type=_json_object,
        metavar="JSON",
        help="the simulated provider's options, a JSON object: "
        """'{"tokens": 200, "tokens_per_second": 20, "pattern": "words"}' """
        '(docs/design.md, "The simulated provider", lists them)',
    )
    submit.add_argument("--metadata", type=_json_object, metavar="JSON", help="a JSON object")
    submit.add_argument(
        "--result-only",
        action="store_true",
        help="with --follow: print nothing until the job succeeds, then its result (by default "
        "text streams as it comes, to a pipe too)",
    )
    submit.add_argument(
        "--idempotency-key", help="default: a fresh one, reused if the request is retried"
    )
    later = submit.add_mutually_exclusive_group()
    later.add_argument("--run-at", dest="run_at", help="start no earlier than this RFC 3339 time")
    later.add_argument("--delay", type=float, dest="delay_s", help="start after this many seconds")

    batch = commands.add_parser(
        "batch",
        parents=[common],
        help="create many jobs: one POST /api/jobs body per line (JSON lines)",
    )
    batch.add_argument(
        "file", type=argparse.FileType("rb"), help="a JSON-lines file, or - for standard input"
    )

    follow = commands.add_parser("follow", parents=[common], help="stream a job's output")
    follow.add_argument("job_id")
    follow.add_argument("--after", type=int, default=0, help="resume after this event id")
    follow.add_argument("--result-only", action="store_true", help="as for submit --follow")
    get = commands.add_parser("get", parents=[common], help="show a job")
    get.add_argument("job_id")
    listing = commands.add_parser("list", parents=[common], help="list jobs, newest first")
    listing.add_argument("--status", help="only jobs in this status (queued, running, dead...)")
    listing.add_argument("--limit", type=int, default=20, help="jobs per page, 1 to 100")
    listing.add_argument("--cursor", help="the next page (printed after a full page)")
    cancel = commands.add_parser("cancel", parents=[common], help="cancel a job")
    cancel.add_argument("job_id")
    retry = commands.add_parser(
        "retry", parents=[common], help="retry a dead job: the retry is a new job, linked to it"
    )
    retry.add_argument("job_id")
    retry.add_argument("--follow", "-f", action="store_true", help="stream the new job's output")
    retry.add_argument("--result-only", action="store_true", help="as for submit --follow")
    return top


def _json_object(raw: str) -> dict[str, Any]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def _json_input(raw: str) -> dict[str, Any]:
    if not raw.startswith("@"):
        return _json_object(raw)
    try:
        text = Path(raw[1:]).read_bytes()
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {raw[1:]}: {exc.strerror}") from None
    try:
        return _json_object(text.decode("utf-8", errors="replace"))
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{raw[1:]}: {exc}") from None


_PROCESSES = {
    "server": "run the HTTP API (JOBSTREAM_HOST, JOBSTREAM_PORT) until SIGTERM",
    "worker": "run a worker until SIGTERM",
    "migrate": "bring DATABASE_URL's database to this version's schema",
}


def _process(name: str) -> int:
    # Imported here: the client's commands start without loading the server or the worker.
    if name == "server":
        from jobstream.server.__main__ import main as run
    elif name == "worker":
        from jobstream.worker.__main__ import main as run
    else:
        from jobstream.migrate import main as run
    return run()


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["tenants"]:
        # Imported here, as the processes are: the client's commands never load the database.
        from jobstream import tenants

        return tenants.main(argv[1:], prog="jobstream tenants")
    top = parser()
    args = top.parse_args(argv)
    if args.command in _PROCESSES:
        return _process(args.command)
    if args.command == "submit" and args.input is not None and args.job is None:
        top.error("argument --input: only with --job (a prompt is the built-in job's input)")
    progress = Progress()
    try:
        return asyncio.run(_run(args, progress))
    except (KeyboardInterrupt, Interrupted, asyncio.CancelledError) as exc:
        if not (progress.interrupted or isinstance(exc, KeyboardInterrupt)):
            raise
        if progress.job_id is not None:
            # Following is only watching: the job runs on, and its log waits for us.
            print(
                f"\njobstream: stopped following; job {progress.job_id} goes on. Resume with: "
                f"jobstream follow {progress.job_id} --after {progress.cursor}",
                file=sys.stderr,
            )
        return EXIT_INTERRUPTED
    except Refused as exc:
        print(f"jobstream: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except Unreachable as exc:
        print(f"jobstream: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE


async def _run(args: argparse.Namespace, progress: Progress) -> int:
    on_ctrl_c(progress)
    out = _Output(sys.stdout, sys.stderr, json_lines=args.json)
    try:
        return await _command(args, out, progress)
    finally:
        out.clear()  # whatever ends the command (a refusal, Ctrl-C) writes on a clean line


async def _command(args: argparse.Namespace, out: _Output, progress: Progress) -> int:
    async with AsyncClient(args.url, api_key=args.api_key, on_retry=out.retrying) as client:
        if args.command == "submit":
            return await _submit(client, args, out, progress)
        if args.command == "batch":
            return await _batch(client, args.file, json_lines=args.json)
        if args.command == "follow":
            return await _follow(client, args.job_id, args.after, out, progress, args.result_only)
        if args.command == "get":
            _print_job(await client.get(args.job_id), json_lines=args.json)
            return EXIT_OK
        if args.command == "list":
            page = await client.list(status=args.status, limit=args.limit, cursor=args.cursor)
            _print_list(page, json_lines=args.json)
            return EXIT_OK
        if args.command == "retry":
            # Safe to send again (the client does): a second request answers with the same retry.
            job = await client.retry(args.job_id)
            return await _started(client, job, args, out, progress)
        job = await client.cancel(args.job_id)
        if args.json:
            _emit(job)
        else:
            print(f"job {job['id']}: {job['status']}")
        return EXIT_OK


async def _submit(
    client: AsyncClient, args: argparse.Namespace, out: _Output, progress: Progress
) -> int:
    fields = (
        "provider", "model", "max_tokens", "max_attempts", "priority", "timeout_s", "run_at",
        "delay_s",
    )  # fmt: skip
    body: dict[str, Any] = {name: getattr(args, name) for name in fields}
    body = {name: value for name, value in body.items() if value is not None}
    body |= {name: getattr(args, name) for name in ("simulate", "metadata") if getattr(args, name)}
    if args.job is not None:
        job = await client.submit_job(
            args.job, args.input or {}, idempotency_key=args.idempotency_key, **body
        )
    else:
        job = await client.submit(args.prompt, idempotency_key=args.idempotency_key, **body)
    return await _started(client, job, args, out, progress)


async def _started(
    client: AsyncClient,
    job: dict[str, Any],
    args: argparse.Namespace,
    out: _Output,
    progress: Progress,
) -> int:
    """A job was made (a submit, a retry): say which, and follow it if asked."""
    if args.json:
        _emit(job)
    elif args.follow:
        retry_of = job.get("retry_of")
        print(f"job {job['id']}" + (f" (retry of {retry_of})" if retry_of else ""), file=sys.stderr)
    else:
        print(job["id"])
    if not args.follow:
        return EXIT_OK
    return await _follow(client, job["id"], 0, out, progress, args.result_only)


async def _batch(client: AsyncClient, lines: BinaryIO, *, json_lines: bool) -> int:
    """POST the jobs 1,000 at a time; print one line per job, in order: its id, or why not."""
    refused = 0
    chunk: list[Any] = []

    async def send() -> None:
        nonlocal refused
        for result in await client.batch(chunk):
            if json_lines:
                _emit(result)
            elif "id" in result:
                print(result["id"] + ("  (replayed)" if result["replayed"] else ""))
            else:
                refused += 1
                print(f"refused: {result['status']} {result['title']}: {result['detail']}")
        chunk.clear()

    with lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                job = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise Refused(400, f"line {number} is not JSON", str(exc)) from None
            chunk.append(job)
            if len(chunk) == BATCH_SIZE:
                await send()
        if chunk:
            await send()
    return EXIT_REFUSED if refused else EXIT_OK


async def _follow(
    client: AsyncClient,
    job_id: str,
    after: int,
    out: _Output,
    progress: Progress,
    result_only: bool,
) -> int:
    progress.job_id, progress.cursor = job_id, after
    out.result_only = result_only
    if out.json:
        async for event in client.events(job_id, after=after):
            if progress.interrupted:
                raise Interrupted
            progress.cursor = event.get("seq", progress.cursor)
            _emit({k: v for k, v in event.items() if k != "snapshot"})
        end = await client.get(job_id)
        result = Result(end["status"], "", end.get("error"), end)
    else:
        result = Result("unknown", "")
        async for item in client.follow(job_id, after=after):
            if progress.interrupted:
                raise Interrupted
            if isinstance(item, Result):
                result = item
                continue
            progress.cursor = item.seq
            out.item(item)
        out.finish(result)
    progress.job_id = None  # it ended: nothing to resume
    if result.succeeded:
        return EXIT_OK
    error = result.error or {}
    print(
        f"jobstream: job {job_id} {result.status}: "
        f"{error.get('class', 'error')}: {error.get('message', '')}",
        file=sys.stderr,
    )
    # An operator's retry is a new job, so this log ends here: the job resource links to it.
    retry = result.job.get("retried_as")
    if result.status == "dead" and retry:
        print(
            f"jobstream: job {job_id} was retried as {retry}: jobstream follow {retry}",
            file=sys.stderr,
        )
    return EXIT_JOB_FAILED


class _Output:
    """Text as it streams, to a terminal or a pipe (flushed per chunk); the result alone with
    --result-only; or JSON lines. Notes (resets, reconnects) and progress go to stderr."""

    def __init__(self, out: TextIO, err: TextIO, *, json_lines: bool) -> None:
        self._out = out
        self._err = err
        self.json = json_lines
        self.result_only = False
        self._text = ""
        self._mid_line = False  # what was written to `out` so far does not end with a newline
        self._progress = ProgressDisplay(err, text_on_screen=out.isatty())

    def item(self, item: Text | Reset | JobProgress) -> None:
        live = not self.result_only
        if isinstance(item, JobProgress):
            self._progress.show(item.fraction, item.message, mid_line=self._mid_line)
            return
        if isinstance(item, Reset):
            self._progress.start_over()
            if self._text and live:
                # What was written came from an attempt that failed (or a log since compacted):
                # the text starts over.
                self._write("\n")
                why = (
                    "resynchronised from the snapshot"
                    if item.reason == "resync"
                    else (f"attempt {item.attempt} ({item.reason}): starting over")
                )
                self._note(why)
            self._text = item.text
            if item.text and live:
                self._write(item.text)
            return
        self._text += item.text
        if live:
            self._write(item.text)

    def retrying(self, delay_s: float, reason: str) -> None:
        self._note(f"connection lost ({reason}); resuming in {delay_s:.1f} s")

    def finish(self, result: Result) -> None:
        self._progress.clear()
        output = _output_line(result)
        if self.result_only:
            # A script never mistakes a failed job's partial text for a result.
            if result.succeeded:
                text = result.text or output
                self._write(text if text.endswith("\n") else text + "\n")
        elif output:
            self._write(("\n" if self._mid_line else "") + output)
        elif self._text and not self._text.endswith("\n"):
            self._write("\n")
        self._out.flush()

    def clear(self) -> None:
        self._progress.clear()

    def _write(self, text: str) -> None:
        if not text:
            return
        self._progress.clear()
        self._out.write(text)
        self._out.flush()
        self._mid_line = not text.endswith("\n")

    def _note(self, text: str) -> None:
        self._progress.clear()
        self._err.write(f"[jobstream: {text}]\n")
        self._err.flush()


def _output_line(result: Result) -> str:
    """A job of your own may write no text: then what it made is its output, as a JSON line."""
    if not result.succeeded or result.text or result.output is None:
        return ""
    return orjson.dumps(result.output).decode() + "\n"


def _emit(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value).decode() + "\n")
    sys.stdout.flush()


def _print_list(page: dict[str, Any], *, json_lines: bool) -> None:
    if json_lines:
        for job in page["jobs"]:
            _emit(job)
    else:
        for job in page["jobs"]:
            attempts = f"{job['attempts']}/{job['max_attempts']}"
            preview = job["prompt_preview"].replace("\n", " ")[:50]
            print(f"{job['id']}  {job['status']:<10} {attempts:<6} {job['created_at']}  {preview}")
    if page.get("next_cursor"):
        print(f"more: jobstream list --cursor {page['next_cursor']}", file=sys.stderr)


def _print_job(job: dict[str, Any], *, json_lines: bool) -> None:
    if json_lines:
        _emit(job)
        return
    rows = [
        ("id", job["id"]),
        *([("job", job["job"])] if job.get("job") else []),
        ("status", f"{job['status']} (attempt {job['attempts']} of {job['max_attempts']})"),
        ("events", str(job["last_seq"])),
    ]
    if job.get("run_at"):
        rows.append(("run at", job["run_at"]))
    if job.get("error"):
        rows.append(("error", f"{job['error'].get('class')}: {job['error'].get('message')}"))
    rows += [(name, job[key]) for name, key in LINKS if job.get(key)]
    for name, value in rows:
        print(f"{name:<11}{value}")
    result = job.get("result") or {}
    text = result.get("text", job["output"]["text"])
    if not text and result.get("output") is not None:
        text = orjson.dumps(result["output"]).decode()
    if text:
        print()
        print(text)


if __name__ == "__main__":
    sys.exit(main())
