"""`jobstream`: submit (one or a batch), follow, read, cancel and retry jobs from a terminal.

Exit codes: 0 the job succeeded (or the request was done); 1 the job ended without success
(failed, dead, cancelled); 2 the request was refused (unknown job, invalid input); 3 the server
could not be reached; 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from collections.abc import Sequence
from typing import Any, BinaryIO, TextIO

import httpx
import orjson

from jobstream.follower import Follower, FollowError

DEFAULT_URL = "http://127.0.0.1:8000"
EXIT_OK, EXIT_JOB_FAILED, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
BATCH_SIZE = 1000  # the most POST /api/jobs/batch takes
# How `get` shows an operator's retry, which is a new job linked both ways.
LINKS = (("retry of", "retry_of"), ("retried as", "retried_as"))


class Refused(Exception):
    """The server answered with a 4xx problem: say so and exit 2."""


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

    submit = commands.add_parser("submit", parents=[common], help="create a job")
    submit.add_argument("prompt")
    submit.add_argument("--follow", "-f", action="store_true", help="stream its output")
    submit.add_argument("--provider")
    submit.add_argument("--model")
    submit.add_argument("--max-tokens", type=int)
    submit.add_argument("--max-attempts", type=int)
    submit.add_argument("--priority", type=int)
    submit.add_argument("--timeout", type=float, dest="timeout_s")
    submit.add_argument("--simulate", type=_json_object, help="the simulated provider's options")
    submit.add_argument("--metadata", type=_json_object)
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
    get = commands.add_parser("get", parents=[common], help="show a job")
    get.add_argument("job_id")
    cancel = commands.add_parser("cancel", parents=[common], help="cancel a job")
    cancel.add_argument("job_id")
    retry = commands.add_parser(
        "retry", parents=[common], help="retry a dead job: the retry is a new job, linked to it"
    )
    retry.add_argument("job_id")
    retry.add_argument("--follow", "-f", action="store_true", help="stream the new job's output")
    return top


def _json_object(raw: str) -> dict[str, Any]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return asyncio.run(_run(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Refused as exc:
        print(f"jobstream: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except httpx.TransportError as exc:
        print(f"jobstream: cannot reach {args.url}: {exc or type(exc).__name__}", file=sys.stderr)
        return EXIT_UNREACHABLE


async def _run(args: argparse.Namespace) -> int:
    # No read timeout: a stream may be quiet for as long as the model thinks (heartbeats aside).
    timeout = httpx.Timeout(10.0, read=None)
    async with httpx.AsyncClient(
        base_url=args.url, timeout=timeout, headers=auth_headers(args.api_key)
    ) as client:
        if args.command == "submit":
            return await _submit(client, args)
        if args.command == "batch":
            return await _batch(client, args.file, json_lines=args.json)
        if args.command == "follow":
            return await _follow(client, args.job_id, args.after, json_lines=args.json)
        if args.command == "get":
            job = await _request(client, "GET", f"/api/jobs/{args.job_id}")
            _print_job(job, json_lines=args.json)
            return EXIT_OK
        if args.command == "retry":
            # Safe to send again (_request does): a second request answers with the same retry.
            job = await _request(client, "POST", f"/api/jobs/{args.job_id}/retry")
            return await _started(client, job, follow=args.follow, json_lines=args.json)
        job = await _request(client, "POST", f"/api/jobs/{args.job_id}/cancel")
        if args.json:
            _emit(job)
        else:
            print(f"job {job['id']}: {job['status']}")
        return EXIT_OK


def auth_headers(api_key: str | None) -> dict[str, str]:
    """On the client, so every request sends the key: the stream and its reconnects too."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def _submit(client: httpx.AsyncClient, args: argparse.Namespace) -> int:
    fields = (
        "provider", "model", "max_tokens", "max_attempts", "priority", "timeout_s", "run_at",
        "delay_s",
    )  # fmt: skip
    body: dict[str, Any] = {"prompt": args.prompt}
    body |= {name: getattr(args, name) for name in fields if getattr(args, name) is not None}
    body |= {name: getattr(args, name) for name in ("simulate", "metadata") if getattr(args, name)}
    # The key makes a retried POST (the first answer lost on the way) return the same job.
    key = args.idempotency_key or str(uuid.uuid4())
    job = await _request(client, "POST", "/api/jobs", json=body, headers={"Idempotency-Key": key})
    return await _started(client, job, follow=args.follow, json_lines=args.json)


async def _started(
    client: httpx.AsyncClient, job: dict[str, Any], *, follow: bool, json_lines: bool
) -> int:
    """A job was made (a submit, a retry): say which, and follow it if asked."""
    if json_lines:
        _emit(job)
    elif follow:
        retry_of = job.get("retry_of")
        print(f"job {job['id']}" + (f" (retry of {retry_of})" if retry_of else ""), file=sys.stderr)
    else:
        print(job["id"])
    if not follow:
        return EXIT_OK
    return await _follow(client, job["id"], 0, json_lines=json_lines)


async def _batch(client: httpx.AsyncClient, lines: BinaryIO, *, json_lines: bool) -> int:
    """POST the jobs 1,000 at a time; print one line per job, in order: its id, or why not."""
    refused = 0
    chunk: list[Any] = []

    async def send() -> None:
        nonlocal refused
        answer = await _request(client, "POST", "/api/jobs/batch", json={"jobs": chunk})
        for result in answer["results"]:
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
                raise Refused(f"line {number} is not JSON: {exc}") from None
            if isinstance(job, dict):
                # As for submit: a batch sent again after a lost answer makes no second job.
                job.setdefault("idempotency_key", str(uuid.uuid4()))
            chunk.append(job)
            if len(chunk) == BATCH_SIZE:
                await send()
        if chunk:
            await send()
    return EXIT_REFUSED if refused else EXIT_OK


async def _request(client: httpx.AsyncClient, method: str, path: str, **kw: Any) -> Any:
    for attempt in range(3):
        try:
            response = await client.request(method, path, **kw)
        except httpx.TransportError:
            if attempt == 2:
                raise
            await asyncio.sleep(0.5 * 2**attempt)
            continue
        if response.status_code >= 400:
            try:
                problem = response.json()
                detail = f"{problem.get('title')}: {problem.get('detail')}"
            except ValueError:
                detail = response.text[:200]
            raise Refused(f"{response.status_code} {detail}")
        return response.json()
    raise AssertionError("unreachable")


async def _follow(client: httpx.AsyncClient, job_id: str, after: int, *, json_lines: bool) -> int:
    out = _Output(sys.stdout, sys.stderr, json_lines=json_lines)
    follower = Follower(client, job_id, after=after, on_retry=out.retrying)
    done: dict[str, Any] | None = None
    try:
        async for event in follower.events():
            done = event if event["type"] == "done" else None
            if event["type"] == "resync":
                # The log before first_seq was pruned: the snapshot has the text up to last_seq.
                snap = await _request(client, "GET", f"/api/jobs/{job_id}")
                out.replace(snap["output"]["text"])
                follower.resume_from(snap["last_seq"])
            out.event(event)
    except FollowError as exc:
        raise Refused(f"{exc.status} {exc.detail}") from None
    if done is None:
        # Resumed past `done` (--after the end): the stream had nothing more; the job has.
        done = await _request(client, "GET", f"/api/jobs/{job_id}")
    out.finish(succeeded=done["status"] == "succeeded")
    if done["status"] == "succeeded":
        return EXIT_OK
    error = done.get("error") or {}
    print(
        f"jobstream: job {job_id} {done['status']}: "
        f"{error.get('class', 'error')}: {error.get('message', '')}",
        file=sys.stderr,
    )
    if done["status"] == "dead":
        # An operator's retry is a new job, so this log ends here: the job resource links to it.
        if "retried_as" not in done:
            done = await _request(client, "GET", f"/api/jobs/{job_id}")
        if done.get("retried_as"):
            retry = done["retried_as"]
            print(
                f"jobstream: job {job_id} was retried as {retry}: jobstream follow {retry}",
                file=sys.stderr,
            )
    return EXIT_JOB_FAILED


class _Output:
    """Text as it streams on a terminal; the final text only when piped; or JSON lines."""

    def __init__(self, out: TextIO, err: TextIO, *, json_lines: bool) -> None:
        self._out = out
        self._err = err
        self._json = json_lines
        self._live = out.isatty() and not json_lines
        self._text = ""

    def event(self, event: dict[str, Any]) -> None:
        if self._json:
            _emit(event)
            return
        if event["type"] == "reset":
            if self._text and self._live:
                # What is on screen came from an attempt that failed; the next starts over.
                self._out.write("\n")
                self._note(f"attempt {event['attempt']} ({event.get('reason')}): starting over")
            self._text = ""
        elif event["type"] == "token":
            self._text += event["text"]
            if self._live:
                self._out.write(event["text"])
                self._out.flush()

    def replace(self, text: str) -> None:
        if self._live:
            self._out.write("\n")
            self._note("resynchronised from the snapshot")
            self._out.write(text)
        self._text = text

    def retrying(self, delay_s: float, reason: str) -> None:
        self._note(f"connection lost ({reason}); resuming in {delay_s:.1f} s")

    def finish(self, *, succeeded: bool) -> None:
        if self._json:
            return
        if self._live:
            if self._text and not self._text.endswith("\n"):
                self._out.write("\n")
        elif succeeded:
            # Piped: the result only, so a script never mistakes a failed job's partial text
            # for one (the exit code says it failed).
            self._out.write(self._text if self._text.endswith("\n") else self._text + "\n")
        self._out.flush()

    def _note(self, text: str) -> None:
        self._err.write(f"[jobstream: {text}]\n")
        self._err.flush()


def _emit(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value).decode() + "\n")
    sys.stdout.flush()


def _print_job(job: dict[str, Any], *, json_lines: bool) -> None:
    if json_lines:
        _emit(job)
        return
    rows = [
        ("id", job["id"]),
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
    text = (job.get("result") or {}).get("text", job["output"]["text"])
    if text:
        print()
        print(text)


if __name__ == "__main__":
    sys.exit(main())
