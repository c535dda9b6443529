"""Tenants and their API keys: create one with a fresh key, find a tenant by a key, rotate
or revoke a tenant's key.

A key is shown once, at creation or rotation; the database keeps only its sha256 hex, so neither
a dump nor a log line holds a usable key. The keys are 256 random bits, so a plain (unsalted)
fast hash is enough: there is nothing to guess from a dictionary.

Every rotation and revocation bumps the tenant's key generation, which the events_url tokens of
its jobs carry (server/stream_tokens.py): a revocation ends them at once, a rotation when the old
key's grace ends (JOBSTREAM_KEY_GRACE_S).

    python -m jobstream.tenants create <id> [--name N] [--budget-usd X] [--max-running N]
    python -m jobstream.tenants rotate-key <id> [--grace-s S]   (or `jobstream tenants ...`)
    python -m jobstream.tenants revoke-key <id>
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import secrets
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation

from jobstream import db, logs, migrations
from jobstream.db import Queryable
from jobstream.errors import JobstreamError
from jobstream.settings import Settings, SettingsError
from jobstream.sql import queries

KEY_PREFIX = "js_"  # recognisable in a config file or a secret scanner
MAX_KEY_LENGTH = 200  # longer is not one of ours: refused before hashing


class TenantExists(JobstreamError):
    """A tenant with this id exists already."""


class UnknownTenant(JobstreamError):
    """No tenant has this id."""


@dataclass(frozen=True, slots=True)
class KeyHolder:
    """Whose key a request presented, and that key's generation (its events tokens carry it)."""

    tenant_id: str
    generation: int


@dataclass(frozen=True, slots=True)
class Rotated:
    key: str  # the new key: stored nowhere, shown once
    generation: int
    previous_until: datetime | None  # when the old key stops; None: it has stopped already


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


async def create(
    conn: Queryable,
    tenant_id: str,
    *,
    name: str | None = None,
    budget_usd: Decimal | None = None,
    max_running: int | None = None,
) -> str:
    """Create the tenant; returns its API key, which is stored nowhere and cannot be shown again."""
    key = new_key()
    created = await conn.fetchval(
        queries.INSERT_TENANT, tenant_id, name or tenant_id, key_hash(key), budget_usd, max_running
    )
    if created is None:
        raise TenantExists(f"tenant {tenant_id!r} exists already")
    return key


async def by_key(conn: Queryable, key: str) -> str | None:
    """The id of the tenant this key belongs to, or None."""
    holder = await key_holder(conn, key)
    return holder.tenant_id if holder is not None else None


async def key_holder(conn: Queryable, key: str) -> KeyHolder | None:
    """The tenant of this key, its current one or the previous one in its grace, or None."""
    if not key or len(key) > MAX_KEY_LENGTH:
        return None
    row = await conn.fetchrow(queries.TENANT_BY_KEY_HASH, key_hash(key))
    return KeyHolder(row["id"], row["generation"]) if row is not None else None


async def rotate_key(conn: Queryable, tenant_id: str, *, grace_s: float) -> Rotated:
    """Give the tenant a new key; its current one stays valid `grace_s` more seconds (0: it
    stops now). The new key is returned once and stored nowhere. Raises UnknownTenant."""
    key = new_key()
    row = await conn.fetchrow(queries.ROTATE_KEY, tenant_id, key_hash(key), grace_s)
    if row is None:
        raise UnknownTenant(f"no tenant {tenant_id!r}")
    return Rotated(key, row["key_generation"], row["previous_key_until"])


async def revoke_key(conn: Queryable, tenant_id: str) -> int:
    """Stop the tenant's keys now (a previous one in its grace too), and every events token
    issued under them; returns the new generation. Raises UnknownTenant."""
    generation: int | None = await conn.fetchval(queries.REVOKE_KEY, tenant_id)
    if generation is None:
        raise UnknownTenant(f"no tenant {tenant_id!r}")
    return generation


def _parser(prog: str) -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog=prog, description="Tenants and their API keys.")
    commands = top.add_subparsers(dest="command", required=True)
    create_cmd = commands.add_parser("create", help="create a tenant and print its API key once")
    create_cmd.add_argument("tenant_id")
    create_cmd.add_argument("--name")
    create_cmd.add_argument("--budget-usd", type=_money, help="default: unlimited")
    create_cmd.add_argument(
        "--max-running",
        type=_positive,
        help="jobs running at once (default: a fair share of the workers' slots, "
        "JOBSTREAM_TENANT_MAX_SHARE of them at most while other tenants have jobs)",
    )
    rotate = commands.add_parser(
        "rotate-key",
        help="give a tenant a new key, printed once; the old one stays valid for the grace",
    )
    rotate.add_argument("tenant_id")
    rotate.add_argument(
        "--grace-s",
        type=_seconds,
        help="seconds the old key stays valid (default: JOBSTREAM_KEY_GRACE_S; 0: stop it now)",
    )
    revoke = commands.add_parser(
        "revoke-key",
        help="stop a tenant's keys and its events_url tokens now (rotate-key gives a new key)",
    )
    revoke.add_argument("tenant_id")
    return top


def _money(raw: str) -> Decimal:
    try:
        value = Decimal(raw)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"not a number: {raw!r}") from None
    if not value.is_finite() or value < 0:
        raise argparse.ArgumentTypeError("must be a non-negative amount")
    return value


def _seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {raw!r}") from None
    if not 0 <= value <= 10 * 365 * 86_400:  # also refuses nan and inf
        raise argparse.ArgumentTypeError("must be a number of seconds, from 0 to ten years")
    return value


def _positive(raw: str) -> int:
    if not raw.isdigit() or int(raw) < 1:
        raise argparse.ArgumentTypeError("must be a whole number of at least 1")
    return int(raw)


async def _run(database_url: str, args: argparse.Namespace, grace_s: float) -> tuple[str, str]:
    """The command's (stdout, stderr): a key goes to stdout alone, what happened to stderr."""
    conn = await db.connect(database_url)
    try:
        await migrations.apply_schema(conn)  # a fresh database has no tenants table yet
        tenant = args.tenant_id
        if args.command == "create":
            key = await create(
                conn, tenant, name=args.name, budget_usd=args.budget_usd,
                max_running=args.max_running,
            )  # fmt: skip
            return key, f"tenant {tenant} created; this key is shown once"
        if args.command == "rotate-key":
            rotated = await rotate_key(conn, tenant, grace_s=grace_s)
            old = (
                f"the old key works until {rotated.previous_until.isoformat()}"
                if rotated.previous_until is not None
                else "no other key works"
            )
            return rotated.key, (
                f"tenant {tenant}: new key (generation {rotated.generation}), shown once; {old}"
            )
        generation = await revoke_key(conn, tenant)
        return "", (
            f"tenant {tenant}: key revoked (generation {generation}); no key works and its "
            "jobs' events_url tokens are refused (rotate-key gives it a new key)"
        )
    finally:
        await conn.close()


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m jobstream.tenants") -> int:
    args = _parser(prog).parse_args(argv)
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"jobstream tenants: {exc}", file=sys.stderr)
        return 2
    if settings.database_url is None:
        print("jobstream tenants: DATABASE_URL is not set", file=sys.stderr)
        return 2
    logs.configure(settings.log_level, json=settings.log_json)  # to stderr: stdout is the key
    grace_s = getattr(args, "grace_s", None)
    try:
        key, said = asyncio.run(
            # One connection of its own, with asyncpg's statement cache: the direct URL, if any.
            _run(
                settings.session_database_url or settings.database_url,
                args,
                settings.key_grace_s if grace_s is None else grace_s,
            )
        )
    except (TenantExists, UnknownTenant) as exc:
        print(f"jobstream tenants: {exc}", file=sys.stderr)
        return 1
    # stdout carries the key alone, so `KEY=$(python -m jobstream.tenants create acme)` works.
    if key:
        print(key)
    print(said, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
