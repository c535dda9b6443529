"""Named jobs from the client and the CLI (issue 32): `submit_job`, `submit --job NAME --input`,
and `progress` events while following, against an in-process fake of the HTTP API."""

from __future__ import annotations

import io
import re
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from jobstream import cli, client, sse
from jobstream.client import AsyncClient, Client, Progress, Refused, Reset, Result, Text
from jobstream.progress_bar import describe

JOB_ID = "0191a6f0-0000-7000-8000-000000000001"


class FakeApi:
    """POST /api/jobs, GET /api/jobs/{id} and its event stream, as the server answers them."""

    def __init__(self, events: list[dict[str, Any]], result: dict[str, Any] | None = None) -> None:
        self.serve(events, result)
        self.posts: list[httpx.Request] = []
        self.create_status = 202
        self.create_answer: dict[str, Any] = {"id": JOB_ID, "status": "queued"}
        self.gone = False  # GET /api/jobs/{id} answers 404 (the job was deleted)

    def serve(self, events: list[dict[str, Any]], result: dict[str, Any] | None) -> None:
        """The job's log (each event numbered) and the result its resource shows."""
        self.events = [
            {"seq": seq, "attempt": 1, "at": "2026-01-01T00:00:00Z", **event}
            for seq, event in enumerate(events, start=1)
        ]
        self.result = result

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "POST" and path == "/api/jobs":
            self.posts.append(request)
            return httpx.Response(self.create_status, json=self.create_answer)
        if path == f"/api/jobs/{JOB_ID}/events":
            after = int(request.headers.get("Last-Event-ID", "0"))
            frames = b"".join(
                sse.frame(e["type"], orjson.dumps(e).decode(), id=str(e["seq"]))
                for e in self.events
                if e["seq"] > after
            )
            return httpx.Response(
                200, headers={"Content-Type": "text/event-stream"}, content=frames
            )
        if path == f"/api/jobs/{JOB_ID}" and not self.gone:
            done = self.events[-1]
            job = {
                "id": JOB_ID, "job": "answer", "status": done["status"], "attempts": 1,
                "max_attempts": 3, "last_seq": len(self.events), "output": {"text": ""},
                "result": self.result, "error": None,
            }  # fmt: skip
            return httpx.Response(200, json=job)
        return httpx.Response(404, json={"title": "Not Found", "detail": path})

    def async_client(self, url: str = "http://jobs.test", **kw: Any) -> AsyncClient:
        http = httpx.AsyncClient(transport=httpx.MockTransport(self.handle), base_url=url)
        return AsyncClient(url, http=http, **kw)

    def body(self, n: int = -1) -> Any:
        return orjson.loads(self.posts[n].content)


def succeeded(text: str, output: Any) -> dict[str, Any]:
    return {"type": "done", "status": "succeeded", "result": {"text": text, "output": output}}


def progress(fraction: float, message: str | None) -> dict[str, Any]:
    return {"type": "progress", "fraction": fraction, "message": message}


STREAM = [
    {"type": "status", "status": "running"},
    progress(0.4, "thinking"),
    {"type": "token", "text": "Hello "},
    progress(0.8, "writing"),
    {"type": "token", "text": "world"},
    succeeded("Hello world", {"greeting": "Hello world"}),
]


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    """The CLI, and the blocking client, talk to a FakeApi (its events are set per test)."""
    fake = FakeApi(STREAM, STREAM[-1]["result"])
    monkeypatch.setattr(cli, "AsyncClient", fake.async_client)
    monkeypatch.setattr(client, "AsyncClient", fake.async_client)
    return fake


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main([*args, "--url", "http://jobs.test"])
    out, err = capsys.readouterr()
    return code, out, err


def usage_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The one error line argparse prints (after its usage) for a bad command line: exit 2."""
    with pytest.raises(SystemExit) as stopped:
        cli.main([*args, "--url", "http://jobs.test"])
    assert stopped.value.code == 2
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert out == "" and len(errors) == 1, err
    return errors[0]


# The client


async def test_submit_job_posts_the_name_input_and_envelope_with_an_idempotency_key() -> None:
    fake = FakeApi(STREAM)
    async with fake.async_client() as jobs:
        job = await jobs.submit_job("answer", {"text": "hi"}, priority=5, delay_s=30.0)
        await jobs.submit_job("answer", {"text": "hi"}, idempotency_key="k-1")
    assert job == {"id": JOB_ID, "status": "queued"}
    assert fake.body(0) == {
        "job": "answer",
        "input": {"text": "hi"},
        "priority": 5,
        "delay_s": 30.0,
    }
    uuid.UUID(fake.posts[0].headers["Idempotency-Key"])  # a fresh key when none is given
    assert fake.posts[1].headers["Idempotency-Key"] == "k-1"
    assert fake.body(1) == {"job": "answer", "input": {"text": "hi"}}


async def test_a_refused_input_is_a_refusal_with_the_servers_status() -> None:
    fake = FakeApi(STREAM)
    fake.create_status = 422
    fake.create_answer = {"title": "Invalid input", "detail": "input.text: field required"}
    async with fake.async_client() as jobs:
        with pytest.raises(Refused) as refused:
            await jobs.submit_job("answer", {})
    assert refused.value.status == 422 and "input.text" in refused.value.detail


def test_the_blocking_client_submits_a_job_the_same_way(api: FakeApi) -> None:
    with Client("http://jobs.test") as jobs:
        job = jobs.submit_job("answer", {"text": "hi"}, idempotency_key="k-2", max_attempts=1)
    assert job["id"] == JOB_ID
    assert api.body() == {"job": "answer", "input": {"text": "hi"}, "max_attempts": 1}
    assert api.posts[-1].headers["Idempotency-Key"] == "k-2"


async def test_follow_yields_progress_between_text_and_the_output_last() -> None:
    fake = FakeApi(STREAM, STREAM[-1]["result"])
    async with fake.async_client() as jobs:
        items = [item async for item in jobs.follow(JOB_ID)]
    assert items[:4] == [
        Progress(0.4, "thinking", 1, 2),
        Text("Hello ", 1, 3),
        Progress(0.8, "writing", 1, 4),
        Text("world", 1, 5),
    ]
    result = items[4]
    assert isinstance(result, Result) and result.succeeded
    assert (result.text, result.output) == ("Hello world", {"greeting": "Hello world"})


# Arguments


def test_job_and_input_parse_from_the_command_line_and_from_a_file(tmp_path: Path) -> None:
    args = cli.parser().parse_args(["submit", "--job", "answer", "--input", '{"text": "hi"}'])
    assert (args.prompt, args.job, args.input) == (None, "answer", {"text": "hi"})
    path = tmp_path / "input.json"
    path.write_text('{"text": "from a file", "n": [1, 2]}')
    args = cli.parser().parse_args(["submit", "--job", "answer", "--input", f"@{path}"])
    assert args.input == {"text": "from a file", "n": [1, 2]}
    args = cli.parser().parse_args(["submit", "a prompt"])
    assert (args.prompt, args.job, args.input) == ("a prompt", None, None)


def test_bad_inputs_are_one_error_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.json"
    line = usage_error(capsys, "submit", "--job", "answer", "--input", f"@{missing}")
    assert line.endswith(f"argument --input: cannot read {missing}: No such file or directory")
    broken = tmp_path / "broken.json"
    broken.write_text('{"text": ')
    line = usage_error(capsys, "submit", "--job", "answer", "--input", f"@{broken}")
    assert f"argument --input: {broken}: not JSON" in line
    line = usage_error(capsys, "submit", "--job", "answer", "--input", "[1, 2]")
    assert line.endswith("argument --input: expected a JSON object")
    assert "only with --job" in usage_error(capsys, "submit", "a prompt", "--input", "{}")
    assert "not allowed with" in usage_error(capsys, "submit", "a prompt", "--job", "answer")
    assert "prompt --job" in usage_error(capsys, "submit")


# The command


def test_submit_without_job_posts_the_prompt_as_before(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(capsys, "submit", "Explain leases", "--priority", "2") == (0, JOB_ID + "\n", "")
    assert api.body() == {"prompt": "Explain leases", "priority": 2}


def test_submit_job_follows_it_text_on_stdout_progress_lines_on_stderr(
    api: FakeApi, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "q.json").write_text('{"text": "hi"}')
    code, out, err = run_cli(
        capsys, "submit", "--job", "answer", "--input", f"@{tmp_path / 'q.json'}",
        "--priority", "3", "--follow",
    )  # fmt: skip
    assert api.body() == {"job": "answer", "input": {"text": "hi"}, "priority": 3}
    assert code == 0
    assert out == "Hello world\n"  # exactly the result text, as for the built-in job
    assert err.splitlines() == [f"job {JOB_ID}", "progress 40% thinking", "progress 80% writing"]


def test_a_job_that_writes_no_text_prints_its_output(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    done = succeeded("", {"answer": 42})
    api.serve([progress(1.0, None), done], done["result"])
    code, out, err = run_cli(capsys, "submit", "--job", "count", "--follow")
    assert api.body() == {"job": "count", "input": {}}
    assert (code, out) == (0, '{"answer":42}\n')
    assert err.splitlines()[1:] == ["progress 100%"]
    code, out, _ = run_cli(capsys, "follow", JOB_ID, "--result-only")
    assert (code, out) == (0, '{"answer":42}\n')


def test_json_lines_pass_progress_through_like_any_event(
    api: FakeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, "follow", JOB_ID, "--json")
    assert code == 0 and err == ""
    assert [orjson.loads(line) for line in out.splitlines()] == api.events


# Rendering progress


def test_a_pipe_gets_one_plain_line_per_change() -> None:
    out, err = io.StringIO(), io.StringIO()
    shown = cli._Output(out, err, json_lines=False)
    for item in (
        Progress(0.29, "thinking", 1, 1),
        Progress(0.291, "thinking", 1, 2),  # the same line again: not repeated
        Text("par", 1, 3),
        Reset(2, "transient", 4),
        Progress(0.29, "thinking", 2, 5),  # a new attempt's progress is news
        Progress(0.5, "line one\nline two\x1b[2J", 2, 6),
        Text("full text", 2, 7),
    ):
        shown.item(item)
    shown.finish(Result("succeeded", "full text"))
    assert out.getvalue() == "par\nfull text\n"
    assert err.getvalue().splitlines() == [
        "progress 29% thinking",
        "[jobstream: attempt 2 (transient): starting over]",
        "progress 29% thinking",
        "progress 50% line one line two [2J",
    ]


def test_the_percentage_is_floored_and_the_fraction_clamped() -> None:
    assert describe(0.29, None) == "29%"  # 0.29 * 100 is 28.999999999999996
    assert describe(0.999, "almost") == "99% almost"
    assert (describe(1.7, ""), describe(-0.2, " ")) == ("100%", "0%")


class Terminal(io.StringIO):
    """What stdout and stderr write to when both are the same terminal, `height` rows tall."""

    def __init__(self, height: int = 24) -> None:
        super().__init__()
        self.height = height

    def isatty(self) -> bool:
        return True

    def screen(self) -> list[str]:
        return render(self.getvalue(), self.height)


def render(written: str, height: int) -> list[str]:
    """The lines a VT100 would have shown for `written` (only the controls the bar uses),
    scrolled-off lines first, trailing blanks dropped."""
    lines: list[list[str]] = [[]]
    top = row = col = 0  # lines[top] is the screen's first row; row is on the screen
    saved = (0, 0)  # DECSC saves a place on the screen, not in the text
    for token in re.findall(r"\x1b\[\?7[lh]|\x1b\[K|\x1b[DM78]|.", written, re.DOTALL):
        if token in ("\x1b[?7l", "\x1b[?7h"):
            continue  # autowrap: no line here is as wide as the screen
        assert not token.startswith("\x1b") or len(token) > 1, f"unexpected control {written!r}"
        if token in ("\n", "\x1bD"):
            if row == height - 1:
                top += 1  # scroll up
            else:
                row += 1
            col = 0 if token == "\n" else col  # the terminal driver sends "\n" as CR LF
        elif token == "\x1bM":
            assert row > 0, "a reverse index at the top would push the screen's last line off"
            row -= 1
        elif token == "\r":
            col = 0
        elif token == "\x1b7":
            saved = (row, col)
        elif token == "\x1b8":
            row, col = saved
        elif token == "\x1b[K":
            del lines[top + row][col:]
        else:
            line = lines[top + row]
            line += [" "] * (col + 1 - len(line))
            line[col] = token
            col += 1
        lines += [[] for _ in range(top + row + 1 - len(lines))]
    shown = ["".join(line).rstrip() for line in lines]
    while shown and not shown[-1]:
        shown.pop()
    return shown


def terminal_output(height: int = 24) -> tuple[Terminal, cli._Output]:
    screen = Terminal(height)
    return screen, cli._Output(screen, screen, json_lines=False)


def test_on_a_terminal_the_bar_waits_under_unfinished_text_and_leaves_it_whole() -> None:
    screen, shown = terminal_output()
    shown.item(Text("Hello wor", 1, 1))
    shown.item(Progress(0.4, "thinking", 1, 2))
    assert screen.screen() == ["Hello wor", "[########............] 40% thinking"]
    shown.item(Progress(0.6, "still thinking", 1, 3))  # redrawn in place
    assert screen.screen() == ["Hello wor", "[############........] 60% still thinking"]
    shown.item(Text("ld\nSecond", 1, 4))  # the bar goes before the text goes on
    assert screen.screen() == ["Hello world", "Second"]
    shown.item(Progress(0.9, None, 1, 5))
    shown.finish(Result("succeeded", "Hello world\nSecond"))
    assert screen.screen() == ["Hello world", "Second"]


def test_on_the_last_row_the_screen_scrolls_before_the_bar_is_drawn_under_the_text() -> None:
    screen, shown = terminal_output(height=2)
    shown.item(Text("first\nHello wor", 1, 1))
    shown.item(Progress(0.5, "half", 1, 2))
    shown.item(Progress(0.7, "more", 1, 3))
    assert screen.screen() == ["first", "Hello wor", "[##############......] 70% more"]
    shown.item(Text("ld", 1, 4))
    shown.finish(Result("succeeded", "first\nHello world"))
    assert screen.screen() == ["first", "Hello world"]


def test_on_a_terminal_at_a_line_start_the_bar_is_that_line_until_text_or_a_note() -> None:
    screen, shown = terminal_output()
    shown.item(Progress(0.1, "starting", 1, 1))
    assert screen.screen() == ["[##..................] 10% starting"]
    shown.retrying(1.0, "the stream ended early")
    assert screen.screen() == [
        "[jobstream: connection lost (the stream ended early); resuming in 1.0 s]"
    ]
    shown.item(Progress(0.2, "going on", 1, 2))
    shown.item(Text("Hi", 1, 3))
    assert screen.screen()[1:] == ["Hi"]


def test_a_bar_on_stderr_leaves_piped_text_untouched() -> None:
    out, terminal = io.StringIO(), Terminal()
    shown = cli._Output(out, terminal, json_lines=False)
    for item in (Text("a", 1, 1), Progress(0.5, "half", 1, 2), Text("b", 1, 3)):
        shown.item(item)
    shown.item(Progress(1.0, "done", 1, 4))
    assert terminal.screen() == ["[####################] 100% done"]
    shown.clear()  # as when the command ends, however it ends
    shown.finish(Result("succeeded", "ab"))
    assert (out.getvalue(), terminal.screen()) == ("ab\n", [])


def test_a_command_that_ends_in_an_error_erases_the_bar_first(
    api: FakeApi, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    api.serve([progress(0.5, "half"), succeeded("", None)], None)
    api.gone = True  # the follow's last read is refused, with the bar still up
    code, out, _ = run_cli(capsys, "follow", JOB_ID)
    assert (code, out) == (2, "")
    assert terminal.screen() == [f"jobstream: 404 Not Found: /api/jobs/{JOB_ID}"]
