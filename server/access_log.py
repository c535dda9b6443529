"""Keep stream tokens out of the access log: uvicorn logs every request's query string."""

from __future__ import annotations

import logging
import re

_TOKEN = re.compile(r"(?<=[?&]token=)[^&\s\"]+")
ACCESS_LOGGER = "uvicorn.access"


def redact(text: str) -> str:
    return _TOKEN.sub("[redacted]", text)


class RedactTokens(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        return True


def install() -> None:
    """Idempotent: every app built in a process shares the one access logger."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, RedactTokens) for f in logger.filters):
        logger.addFilter(RedactTokens())
