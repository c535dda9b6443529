"""What a job asks for: the validated request, as stored in `jobs.payload`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

_SINCE_V1 = frozenset({"run_at", "delay_s"})


@dataclass(frozen=True)
class JobSpec:
    prompt: str
    provider: str
    model: str | None = None
    max_tokens: int = 512
    priority: int = 0
    max_attempts: int = 3
    retry_unknown: bool = False
    timeout_s: float = 90.0
    webhook_url: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    simulate: dict[str, Any] = field(default_factory=dict)
    # Not before this time, or this many seconds after the create (at most one of the two).
    run_at: datetime | None = None
    delay_s: float | None = None

    def payload(self) -> dict[str, Any]:
        """What the worker needs to run an attempt (stored as jobs.payload)."""
        return {
            "prompt": self.prompt,
            "model": self.model,
            "max_tokens": self.max_tokens,
            "retry_unknown": self.retry_unknown,
            "timeout_s": self.timeout_s,
            "simulate": self.simulate,
        }

    def request_hash(self) -> str:
        """A digest of the whole request, key order ignored: same body, same hash."""
        # vars(), not asdict(): asdict deep-copies every nested value first, a quarter of a batch
        # create's time; orjson reads the nested dicts and the datetime as they are.
        # Fields added since version 1 count only when set, so that a request made before an
        # upgrade still matches its job after it.
        fields = {k: v for k, v in vars(self).items() if v is not None or k not in _SINCE_V1}
        canonical = orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(canonical).hexdigest()


@dataclass(frozen=True)
class AttemptSpec:
    """One attempt's view of its job's payload."""

    prompt: str
    model: str | None
    max_tokens: int
    retry_unknown: bool
    timeout_s: float
    simulate: dict[str, Any]

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> AttemptSpec:
        return cls(
            prompt=payload["prompt"],
            model=payload.get("model"),
            max_tokens=int(payload.get("max_tokens", 512)),
            retry_unknown=bool(payload.get("retry_unknown", False)),
            timeout_s=float(payload.get("timeout_s", 90)),
            simulate=dict(payload.get("simulate") or {}),
        )
