"""structlog set-up: JSON lines (or a console renderer), stdlib and uvicorn routed through it."""

from __future__ import annotations

import logging
import sys

import structlog


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


def configure(level: str = "info", *, json: bool = True) -> None:
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        # Drop a line below the level before any work is done on it: merging the context and
        # stamping the time cost a sixth of a busy worker's time for lines nobody would see.
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, _access_fields],
        pass_foreign_args=True,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
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
