"""Keep stream tokens out of the access log: uvicorn logs every request's query string."""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote_plus

# A query parameter: its name as sent (maybe percent-encoded) and its value.
_PARAM = re.compile(r"(?<=[?&])([^=&\s\"]*)=([^&\s\"]*)")
ACCESS_LOGGER = "uvicorn.access"


def redact(text: str) -> str:
    """Mask every parameter whose name *decodes* to `token`: the server reads `%74oken=` as
    `token=` too, so a match on the raw text alone let such a token into the log."""

    def mask(match: re.Match[str]) -> str:
        name = match.group(1)
        return f"{name}=[redacted]" if unquote_plus(name) == "token" else match.group(0)

    return _PARAM.sub(mask, text)


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
