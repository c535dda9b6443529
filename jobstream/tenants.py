"""Tenants and their API keys: create one with a fresh key, find a tenant by a key.

A key is shown once, at creation; the database keeps only its sha256 hex, so neither a dump nor
a log line holds a usable key. The keys are 256 random bits, so a plain (unsalted) fast hash is
enough: there is nothing to guess from a dictionary.

    python -m jobstream.tenants create <id> [--name N] [--budget-usd X] [--max-running N]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import secrets
import sys
from collections.abc import Sequence
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
    if not key or len(key) > MAX_KEY_LENGTH:
        return None
    tenant_id: str | None = await conn.fetchval(queries.TENANT_BY_KEY_HASH, key_hash(key))
    return tenant_id


def _parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m jobstream.tenants", description="Tenants.")
    commands = top.add_subparsers(dest="command", required=True)
    create_cmd = commands.add_parser("create", help="create a tenant and print its API key once")
    create_cmd.add_argument("tenant_id")
    create_cmd.add_argument("--name")
    create_cmd.add_argument("--budget-usd", type=_money, help="default: unlimited")
    create_cmd.add_argument("--max-running", type=_positive, help="default: 16")
    return top


def _money(raw: str) -> Decimal:
    try:
        value = Decimal(raw)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"not a number: {raw!r}") from None
    if not value.is_finite() or value < 0:
        raise argparse.ArgumentTypeError("must be a non-negative amount")
    return value


def _positive(raw: str) -> int:
    if not raw.isdigit() or int(raw) < 1:
        raise argparse.ArgumentTypeError("must be a whole number of at least 1")
    return int(raw)


async def _create(database_url: str, args: argparse.Namespace) -> str:
    conn = await db.connect(database_url)
    try:
        await migrations.apply_schema(conn)  # a fresh database has no tenants table yet
        return await create(
            conn, args.tenant_id, name=args.name, budget_usd=args.budget_usd,
            max_running=args.max_running,
        )  # fmt: skip
    finally:
        await conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"jobstream tenants: {exc}", file=sys.stderr)
        return 2
    if settings.database_url is None:
        print("jobstream tenants: DATABASE_URL is not set", file=sys.stderr)
        return 2
    logs.configure(settings.log_level, json=settings.log_json)  # to stderr: stdout is the key
    try:
        key = asyncio.run(_create(settings.database_url, args))
    except TenantExists as exc:
        print(f"jobstream tenants: {exc}", file=sys.stderr)
        return 1
    # stdout carries the key alone, so `KEY=$(python -m jobstream.tenants create acme)` works.
    print(key)
    print(f"tenant {args.tenant_id} created; this key is shown once", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
