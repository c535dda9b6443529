"""Webhook delivery: sends the outbox rows jobstream/outbox.py writes (DESIGN.md §7).

One loop per worker claims due rows (`FOR UPDATE SKIP LOCKED`, so workers share the work),
posts each with Standard Webhooks headers, and records the answer: 2xx is `delivered`; anything
else retries with jittered exponential backoff until `webhook_max_attempts`, then `failed`.
Delivery is at least once: receivers dedupe on `webhook-id`, which stays the same across retries.
"""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx
import orjson
import structlog

from jobstream import db, queries
from jobstream.clock import Clock
from jobstream.settings import Settings
from worker import signatures, webhook_targets
from worker.retry import Backoff

log = structlog.get_logger(__name__)

BATCH = 20
_MAX_ERROR_CHARS = 500


class WebhookSender:
    def __init__(
        self, pool: asyncpg.Pool, settings: Settings, *, clock: Clock, rng: random.Random
    ) -> None:
        self._pool = pool
        self._settings = settings
        self._clock = clock
        self._rng = rng
        self._backoff = Backoff(settings.webhook_backoff_base_s, settings.webhook_backoff_max_s)

    async def run(self) -> None:
        """Deliver until cancelled; a full batch means more are due, so look again at once."""
        # Redirects are not followed: a public URL could otherwise bounce us into our network.
        async with httpx.AsyncClient(
            timeout=self._settings.webhook_timeout_s, follow_redirects=False
        ) as http:
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
        """Claim the due deliveries and send them concurrently; returns how many were claimed."""
        # In flight until the timeout, plus a margin for recording the answer.
        hold_s = self._settings.webhook_timeout_s + 30.0
        rows = await self._pool.fetch(
            queries.CLAIM_WEBHOOK_DELIVERIES, self._clock.now(), BATCH, hold_s
        )
        await asyncio.gather(*(self._deliver(http, row) for row in rows))
        return len(rows)

    async def _deliver(self, http: httpx.AsyncClient, row: asyncpg.Record) -> None:
        delivery_id: int = row["id"]
        url: str = row["url"]
        if not self._settings.webhook_allow_private:
            refused = await webhook_targets.refusal(url)
            if refused is not None:
                # Retrying cannot make the target acceptable: give up now, send nothing.
                await self._failed(delivery_id, row["attempts"], None, refused, give_up=True)
                return
        body = orjson.dumps(row["payload"])
        headers = await self._headers(row, body)
        try:
            response = await http.post(url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            await self._failed(delivery_id, row["attempts"], None, error)
            return
        if response.is_success:
            await self._pool.execute(
                queries.MARK_WEBHOOK_DELIVERED, delivery_id, response.status_code
            )
            log.info("webhook_delivered", delivery_id=delivery_id, attempts=row["attempts"])
        else:
            error = f"HTTP {response.status_code}: {response.text[:200]}"
            await self._failed(delivery_id, row["attempts"], response.status_code, error)

    async def _headers(self, row: asyncpg.Record, body: bytes) -> dict[str, str]:
        secret = await self._secret(row)
        now = self._clock.now() or datetime.now(UTC)
        timestamp = int(now.timestamp())
        msg_id = str(row["id"])
        return {
            "content-type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signatures.sign(secret, msg_id, timestamp, body),
        }

    async def _secret(self, row: asyncpg.Record) -> str:
        """The tenant's own secret, else the setting's, else one generated for the tenant."""
        own: str | None = row["webhook_secret"]
        if own:
            return own
        if self._settings.webhook_secret:
            return self._settings.webhook_secret
        stored: str = await self._pool.fetchval(
            queries.ENSURE_WEBHOOK_SECRET, row["tenant_id"], signatures.new_secret()
        )
        return stored

    async def _failed(
        self,
        delivery_id: int,
        attempts: int,
        status_code: int | None,
        error: str,
        *,
        give_up: bool = False,
    ) -> None:
        give_up = give_up or attempts >= self._settings.webhook_max_attempts
        delay = 0.0 if give_up else self._backoff.delay(attempts, self._rng)
        await self._pool.execute(
            queries.MARK_WEBHOOK_FAILED_TRY,
            delivery_id,
            status_code,
            error[:_MAX_ERROR_CHARS],
            give_up,
            delay,
            self._clock.now(),
        )
        fields: dict[str, Any] = {"delivery_id": delivery_id, "attempts": attempts, "error": error}
        log.warning("webhook_failed" if give_up else "webhook_retrying", **fields)
