"""What the fake was asked and what it sent: one record per request, and the counters tests
read. The server thread writes, tests read: one lock, no awaits while holding it."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tests.support.fake_openai.replies import MARKER, Reply

Outcome = Literal[
    "running",
    "completed",
    "error_status",
    "client_closed",
    "dropped",
    "stream_error",
    "server_stopped",
]


@dataclass(frozen=True)
class Call:
    """A chat completion request, parsed."""

    model: str
    prompt: str
    max_tokens: int | None
    include_usage: bool
    messages: tuple[tuple[str, str], ...]
    sampling: tuple[tuple[str, float], ...]
    # The structured output's schema name, when the request asked for json_schema output.
    schema_name: str | None = None


@dataclass
class RequestRecord:
    """One chat completion request as the fake saw it."""

    id: int
    model: str
    prompt: str
    max_tokens: int | None
    include_usage: bool
    authorized: bool
    reply: Reply
    status: int = 200
    outcome: Outcome = "running"
    prompt_tokens: int = 0
    tokens_sent: int = 0
    usage_reported: bool = False
    started_at: float = 0.0  # time.time() when the fake had read the request
    ended_at: float | None = None  # ...and when it stopped counting it as in flight
    messages: tuple[tuple[str, str], ...] = ()  # (role, text) as sent
    sampling: tuple[tuple[str, float], ...] = ()  # temperature and top_p, where sent
    schema_name: str | None = None  # response_format's json_schema name, where asked
    header_names: tuple[str, ...] = ()  # the request's header names, lower case, sorted

    @property
    def billed_prompt_tokens(self) -> int:
        # A provider bills the prompt once it starts generating: any 200 stream.
        return self.prompt_tokens if self.status == 200 else 0

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["billed_prompt_tokens"] = self.billed_prompt_tokens
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RequestRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        values["reply"] = Reply.from_mapping(values["reply"])
        for pairs in ("messages", "sampling"):  # JSON has lists where the record has tuples
            values[pairs] = tuple(tuple(pair) for pair in values.get(pairs, ()))
        values["header_names"] = tuple(values.get("header_names", ()))
        return cls(**values)


@dataclass(frozen=True)
class Stats:
    requests: int
    in_flight: int
    max_in_flight: int
    billed_prompt_tokens: int
    billed_completion_tokens: int
    # Tokens stated in usage chunks: equal to the billed ones for streams that completed.
    reported_prompt_tokens: int
    reported_completion_tokens: int
    outcomes: dict[str, int]
    records: tuple[RequestRecord, ...] = field(repr=False)

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["records"] = [r.to_json() for r in self.records]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Stats:
        values = dict(data)
        values["records"] = tuple(RequestRecord.from_json(r) for r in data["records"])
        return cls(**values)


class Recorder:
    """Everything the fake counts, and the replies queued for the next requests."""

    def __init__(self, default: Reply) -> None:
        self._lock = threading.Lock()
        self._default = default
        self._script: deque[tuple[Reply, int]] = deque()  # (reply, requests it still serves)
        self._marker_uses: dict[str, int] = {}
        self._records: list[RequestRecord] = []
        self._in_flight = 0
        self._max_in_flight = 0

    def push(self, replies: tuple[Reply, ...]) -> None:
        with self._lock:
            self._script.extend((reply, reply.times or 1) for reply in replies)

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self._marker_uses.clear()
            self._records.clear()
            self._max_in_flight = self._in_flight

    def begin(
        self, call: Call, *, authorized: bool, header_names: tuple[str, ...] = ()
    ) -> RequestRecord:
        with self._lock:
            # A rejected key gets a 401 whatever the script says, and leaves the script alone.
            reply = self._choose(call.prompt) if authorized else self._default
            record = RequestRecord(
                id=len(self._records) + 1,
                reply=reply,
                authorized=authorized,
                header_names=header_names,
                started_at=time.time(),
                **dataclasses.asdict(call),
            )
            self._records.append(record)
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            return record

    def _choose(self, prompt: str) -> Reply:
        if self._script:
            reply, left = self._script.popleft()
            if left > 1:
                self._script.appendleft((reply, left - 1))
            return reply
        found = MARKER.search(prompt)
        if found is None:
            return self._default
        reply = Reply.from_marker(found.group(1))
        if reply.times is not None:
            used = self._marker_uses.get(prompt, 0)
            self._marker_uses[prompt] = used + 1
            if used >= reply.times:
                return self._default
        return reply

    def update(self, record: RequestRecord, **changes: Any) -> None:
        with self._lock:
            for name, value in changes.items():
                setattr(record, name, value)

    def sent_token(self, record: RequestRecord) -> None:
        with self._lock:
            record.tokens_sent += 1

    def end(self, record: RequestRecord, outcome: Outcome) -> None:
        """Stop counting the request as in flight; only the first call counts."""
        with self._lock:
            if record.ended_at is not None:
                return
            record.outcome = outcome
            record.ended_at = time.time()
            self._in_flight -= 1

    def snapshot(self) -> Stats:
        with self._lock:
            records = tuple(dataclasses.replace(r) for r in self._records)
            outcomes: dict[str, int] = {}
            for r in records:
                outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
            reported = [r for r in records if r.usage_reported]
            return Stats(
                requests=len(records),
                in_flight=self._in_flight,
                max_in_flight=self._max_in_flight,
                billed_prompt_tokens=sum(r.billed_prompt_tokens for r in records),
                billed_completion_tokens=sum(r.tokens_sent for r in records),
                reported_prompt_tokens=sum(r.prompt_tokens for r in reported),
                reported_completion_tokens=sum(r.tokens_sent for r in reported),
                outcomes=outcomes,
                records=records,
            )
