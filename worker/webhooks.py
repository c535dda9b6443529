"""Webhook delivery: sends the outbox rows jobstream/outbox.py writes (docs/design.md, "Webhooks").

One loop per worker claims due rows (`FOR UPDATE SKIP LOCKED`, so workers share the work),
posts each with Standard Webhooks headers, and records the answer: 2xx is `delivered`; anything
else, a host that does not resolve included, retries with jittered exponential backoff until
`webhook_max_attempts`, then `failed`. A forbidden target (worker/webhook_targets.py) is given up
at once; an allowed one is posted to at the addresses its check resolved, never to a second
lookup's (worker/webhook_transport.py). Delivery is at least once: receivers dedupe on
`webhook-id`, which stays the same across retries.

A claim holds its row for the try's deadline plus a margin; every mark of the outcome is fenced
on the claim (jobstream/sql/webhooks.sql), so a sender that outlived its hold records nothing over
the claim that took the row after it.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpcore
import httpx
import orjson
import structlog

from jobstream import db
from jobstream.clock import Clock
from jobstream.settings import Settings
from jobstream.sql import queries
from jobstream.worker import signatures, webhook_targets, webhook_transport
from jobstream.worker.retry import Backoff

log = structlog.get_logger(__name__)

BATCH = 20
_MAX_ERROR_CHARS = 500
# How long past a try's deadline its claim still holds the row: time to record the outcome
# before another worker may claim it.
RECORD_MARGIN_S = 30.0


@dataclass(frozen=True)
class Delivered:
    status_code: int


@dataclass(frozen=True)
class FailedTry:
    """Try again after a backoff, unless the attempts are used up."""

    error: str
    status_code: int | None = None


@dataclass(frozen=True)
class GiveUp:
    """No retry can succeed: the target is forbidden, or the URL is unusable."""

    error: str


Outcome = Delivered | FailedTry | GiveUp


@dataclass(frozen=True, slots=True)
class Delivery:
    """An outbox row this sender claimed (queries.CLAIM_WEBHOOK_DELIVERIES). `attempts` (this
    try counted) and `held_until` are the claim: every mark of the outcome names them."""

    id: int
    url: str
    payload: dict[str, Any]
    attempts: int
    held_until: datetime
    tenant_id: str
    webhook_secret: str | None  # the tenant's own, if it has one

    @classmethod
    def of(cls, r: asyncpg.Record) -> Delivery:
        return cls(
            r["id"], r["url"], r["payload"], r["attempts"], r["held_until"], r["tenant_id"],
            r["webhook_secret"],
        )  # fmt: skip


class WebhookSender:
    """`resolve` looks a receiver's host up (the loop's getaddrinfo unless given); `network`
    dials the addresses it answered (anyio's sockets unless given)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: Settings,
        *,
        clock: Clock,
        rng: random.Random,
        resolve: webhook_targets.Resolve = webhook_targets.system_resolve,
        network: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self._pool = pool
        self._settings = settings
        self._clock = clock
        self._rng = rng
        self._resolve = resolve
        self._network = network
        self._backoff = Backoff(settings.webhook_backoff_base_s, settings.webhook_backoff_max_s)

    @property
    def hold_s(self) -> float:
        """How long a claim keeps other workers off its row."""
        return self._settings.webhook_timeout_s + RECORD_MARGIN_S

    def client(self) -> httpx.AsyncClient:
        """The client to deliver with: it connects only to checked addresses (unless private
        targets are allowed) and follows no redirects."""
        return webhook_transport.client(
            timeout_s=self._settings.webhook_timeout_s,
            require_pin=not self._settings.webhook_allow_private,
            network=self._network,
        )

    async def run(self) -> None:
        """Deliver until cancelled; a full batch means more are due, so look again at once."""
        async with self.client() as http:
            while True:
                sent = await self._round(http)
                if sent < BATCH:
                    await asyncio.sleep(self._settings.webhook_poll_interval_s)

    async def _round(self, http: httpx.AsyncClient) -> int:
        try:
            return await self.deliver_due(http)
        except db.DISCONNECTS as exc:
            log.warning("webhooks_database_unreachable", error=str(exc) or type(exc).__name__)
        except Exception:
            log.exception("webhook_round_failed")
        return 0

    async def deliver_due(self, http: httpx.AsyncClient) -> int:
        """Claim the due deliveries and send them concurrently through `http`, one of
        `client()`'s; returns how many were claimed."""
        rows = await self._pool.fetch(
            queries.CLAIM_WEBHOOK_DELIVERIES, self._clock.now(), BATCH, self.hold_s
        )
        await asyncio.gather(*(self._deliver(http, Delivery.of(row)) for row in rows))
        return len(rows)

    async def _deliver(self, http: httpx.AsyncClient, delivery: Delivery) -> None:
        await self._record(delivery, await self._try(http, delivery))

    async def _try(self, http: httpx.AsyncClient, delivery: Delivery) -> Outcome:
        url = delivery.url
        timeout_s = self._settings.webhook_timeout_s
        # One deadline for the lookup and the POST together, shorter than the hold: httpx's
        # timeout bounds each phase (connect, each read), so a receiver trickling its answer
        # would otherwise keep one POST going long past the claim.
        deadline = asyncio.get_running_loop().time() + timeout_s
        target: webhook_targets.Allowed | None = None
        if not self._settings.webhook_allow_private:
            match await webhook_targets.check(url, timeout_s=timeout_s, resolve=self._resolve):
                case webhook_targets.Refused(reason):
                    return GiveUp(reason)
                case webhook_targets.Unresolved(reason):
                    return FailedTry(reason)  # a resolver outage heals: retry with backoff
                case webhook_targets.Allowed() as target:
                    pass
        body = orjson.dumps(delivery.payload)
        headers = await self._headers(delivery, body)
        try:
            async with asyncio.timeout_at(deadline):
                with webhook_transport.pinned(target):
                    response = await http.post(url, content=body, headers=headers)
        except TimeoutError:
            return FailedTry(f"no answer within the {timeout_s:g} s deadline")
        except httpx.InvalidURL as exc:
            return GiveUp(f"webhook URL is not valid: {exc}")
        except webhook_transport.Unpinned as exc:
            return GiveUp(f"not sent: {exc}")
        except httpx.HTTPError as exc:
            return FailedTry(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        if response.is_success:
            return Delivered(response.status_code)
        return FailedTry(
            f"HTTP {response.status_code}: {response.text[:200]}", response.status_code
        )

    async def _headers(self, delivery: Delivery, body: bytes) -> dict[str, str]:
        secret = await self._secret(delivery)
        now = self._clock.now() or datetime.now(UTC)
        timestamp = int(now.timestamp())
        msg_id = str(delivery.id)
        return {
            "content-type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signatures.sign(secret, msg_id, timestamp, body),
        }

    async def _secret(self, delivery: Delivery) -> str:
        """The tenant's own secret, else the setting's, else one generated for the tenant."""
        if delivery.webhook_secret:
            return delivery.webhook_secret
        if self._settings.webhook_secret:
            return self._settings.webhook_secret
        stored: str = await self._pool.fetchval(
            queries.ENSURE_WEBHOOK_SECRET, delivery.tenant_id, signatures.new_secret()
        )
        return stored

    async def _record(self, delivery: Delivery, outcome: Outcome) -> None:
        """Write the outcome over this claim, unless another claim has taken the row since."""
        delivery_id = delivery.id
        attempts = delivery.attempts
        fields: dict[str, Any] = {"delivery_id": delivery_id, "attempts": attempts}
        match outcome:
            case Delivered(status_code):
                marked = await self._pool.fetchval(
                    queries.MARK_WEBHOOK_DELIVERED,
                    delivery_id,
                    status_code,
                    attempts,
                    delivery.held_until,
                )
                event = "webhook_delivered"
            case FailedTry(error, status_code):
                give_up = attempts >= self._settings.webhook_max_attempts
                marked = await self._mark_failed(delivery, error, status_code, give_up=give_up)
                event = "webhook_failed" if give_up else "webhook_retrying"
                fields["error"] = error
            case GiveUp(error):
                marked = await self._mark_failed(delivery, error, None, give_up=True)
                event = "webhook_failed"
                fields["error"] = error
        if marked is None:
            # Our hold ran out and another claim took the row: its outcome is the one that
            # counts (a success of ours may be sent again; receivers dedupe on webhook-id).
            log.warning("webhook_outcome_fenced", outcome=event, **fields)
        elif event == "webhook_delivered":
            log.info(event, **fields)
        else:
            log.warning(event, **fields)

    async def _mark_failed(
        self, delivery: Delivery, error: str, status_code: int | None, *, give_up: bool
    ) -> int | None:
        """Record a failed try (retry after a backoff, or `failed`); None when fenced off."""
        attempts = delivery.attempts
        delay = 0.0 if give_up else self._backoff.delay(attempts, self._rng)
        marked: int | None = await self._pool.fetchval(
            queries.MARK_WEBHOOK_FAILED_TRY,
            delivery.id,
            status_code,
            error[:_MAX_ERROR_CHARS],
            give_up,
            delay,
            self._clock.now(),
            attempts,
            delivery.held_until,
        )
        return marked
