"""structlog set-up: JSON lines, or console lines for a person at a terminal; stdlib and uvicorn
routed through it."""

from __future__ import annotations

import logging
import sys
import time
import uuid
from collections.abc import Callable
from contextvars import ContextVar, Token

import structlog

# Lines that a client, or a flood of clients, can cause at any rate: (logger, start of the
# message). asyncio's loop logs a traceback for every failed accept while the process is out of
# descriptors, and retries at once: 90 MB in 25 s. uvicorn warns once per request it turns away.
FLOODABLE: tuple[tuple[str, str], ...] = (
    ("asyncio", "socket.accept() out of system resource"),
    # The retries that pile up during such a storm, each failing once the server closes.
    ("asyncio", "Exception in callback BaseSelectorEventLoop._start_serving"),
    ("uvicorn.error", "Exceeded concurrency limit."),
    ("uvicorn.error", "Invalid HTTP request received."),
    ("uvicorn.error", "Unsupported upgrade request."),
    ("uvicorn.error", "No supported WebSocket library detected."),
)
FLOOD_INTERVAL_S = 10.0


def _access_fields(
    logger: object, method_name: str, event_dict: structlog.types.EventDict
) -> structlog.types.EventDict:
    """uvicorn's access line as fields (`http_request`, method, path, status_code...) instead of
    one preformatted string, so the lines can be filtered like ours. The path arrives already
    redacted (server/access_log.py filters the record before any handler formats it)."""
    # The formatter passes every foreign record's arguments; only the access line's are kept.
    args = event_dict.pop("positional_args", None)
    record = event_dict.get("_record")
    if (
        isinstance(record, logging.LogRecord)
        and record.name == "uvicorn.access"
        and isinstance(args, tuple)
        and len(args) == 5
    ):
        client, method, path, http_version, status_code = args
        event_dict.update(
            event="http_request",
            client=client,
            method=method,
            path=path,
            http_version=http_version,
            status_code=status_code,
        )
    return event_dict


class Throttle(logging.Filter):
    """Lets one line of each FLOODABLE kind through per interval; the next one to pass says how
    many were held back. Every other line passes untouched."""

    def __init__(
        self,
        interval_s: float = FLOOD_INTERVAL_S,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._interval_s = interval_s
        self._clock = clock
        # kind -> (when one last passed, how many were held back since)
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        kind = _floodable_kind(record)
        if kind is None:
            return True
        now = self._clock()
        seen = self._seen.get(kind)
        if seen is not None and now - seen[0] < self._interval_s:
            self._seen[kind] = (seen[0], seen[1] + 1)
            return False
        self._seen[kind] = (now, 0)
        if seen is not None and seen[1]:
            # No "%" added: a record with arguments is still formatted with them.
            record.msg = f"{record.msg} [{seen[1]:,} more like this since the last one, not logged]"
        return True


# The start-up failures the app logs as one line of its own before it raises: uvicorn then logs
# the traceback starlette formatted of it as a message, which says nothing more.
LOGGED_AT_START = ("jobstream.errors.DatabaseUnavailable:",)


def told_startup_traceback(record: logging.LogRecord) -> bool:
    """False for uvicorn's copy of a start-up traceback the app has already told in a line."""
    if record.name != "uvicorn.error" or not isinstance(record.msg, str):
        return True
    if not record.msg.startswith("Traceback (most recent call last)"):
        return True
    last = record.msg.rstrip().rsplit("\n", 1)[-1]
    return not last.startswith(LOGGED_AT_START)


def _floodable_kind(record: logging.LogRecord) -> tuple[str, str] | None:
    if not isinstance(record.msg, str):
        return None
    for name, start in FLOODABLE:
        if record.name == name and record.msg.startswith(start):
            return name, start
    return None


# The attempt a line is about: (job id, attempt, run token). Set once where an attempt's task is
# made (the task copies it), and formatted only into a line actually written: structlog's
# bind_contextvars stringified and stored each field for every attempt, logged or not.
AttemptFields = tuple[uuid.UUID, int, uuid.UUID] | None
_attempt: ContextVar[AttemptFields] = ContextVar("jobstream_attempt", default=None)


def bind_attempt(job_id: uuid.UUID, attempt: int, run_token: uuid.UUID) -> Token[AttemptFields]:
    """Lines logged in this context, and in tasks made from it, name this attempt."""
    return _attempt.set((job_id, attempt, run_token))


def unbind_attempt(token: Token[AttemptFields]) -> None:
    _attempt.reset(token)


def attempt_fields() -> dict[str, object]:
    """What a line logged here says of its attempt: job_id, attempt, run_token (or nothing)."""
    bound = _attempt.get()
    if bound is None:
        return {}
    job_id, attempt, run_token = bound
    return {"job_id": str(job_id), "attempt": attempt, "run_token": str(run_token)}


def _attempt_fields(
    logger: object, method_name: str, event_dict: structlog.types.EventDict
) -> structlog.types.EventDict:
    if _attempt.get() is not None:
        for name, value in attempt_fields().items():
            event_dict.setdefault(name, value)
    return event_dict


def configure(level: str = "info", *, json: bool | None = True) -> None:
    """`json=None`: console lines when stderr is a terminal, JSON lines otherwise (a file, a
    pipe, a log collector). Colour codes only ever go to a terminal."""
    terminal = sys.stderr.isatty()
    if json is None:
        json = not terminal
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        _attempt_fields,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(colors=terminal)
    )
    structlog.configure(
        # Drop a line below the level before any work is done on it (for stdlib loggers bound
        # through structlog.stdlib.get_logger): merging the context and stamping the time cost a
        # sixth of a busy worker's time for lines nobody would see.
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        # A method below the level is a no-op: a filtered line still cost a context copy and a
        # processor call (5 % of a busy worker at level warning).
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, _access_fields],
        pass_foreign_args=True,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            # The console renderer formats tracebacks itself (and warns if they come formatted).
            *([structlog.processors.format_exc_info] if json else []),
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    handler.addFilter(Throttle())
    handler.addFilter(told_startup_traceback)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # uvicorn installs its own handlers; send its records through ours instead.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
    logging.getLogger("asyncio").setLevel(logging.WARNING)
    # httpx logs every request at INFO: the provider logs what matters about its calls itself.
    logging.getLogger("httpx").setLevel(logging.WARNING)
