"""The schema over time (jobstream/migrations.py): fresh, migrated and current databases."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from jobstream import attempts, claims, db, events, migrations
from jobstream.attempts import Success
from jobstream.clock import DatabaseClock
from jobstream.jobspec import JobSpec
from jobstream.sql import queries
from jobstream.usage import Usage
from tests.support import database
from tests.support.clock import ManualClock
from tests.support.polling import eventually
from tests.support.workers import create_job

# The parts of a catalog two schemas must share: columns, constraints, indexes, views,
# functions and tables' storage options (jobs' fillfactor).
CATALOG = """
SELECT 'column' AS kind, c.relname || '.' || a.attname AS name,
       format_type(a.atttypid, a.atttypmod) || ' null=' || (NOT a.attnotnull)::text
         || ' default=' || coalesce(pg_get_expr(d.adbin, d.adrelid), '') AS definition
  FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'v')
UNION ALL
SELECT 'constraint', c.conrelid::regclass || '.' || c.conname, pg_get_constraintdef(c.oid)
  FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace AND n.nspname = 'public'
UNION ALL
SELECT 'index', indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'
UNION ALL
SELECT 'view', viewname, definition FROM pg_views WHERE schemaname = 'public'
UNION ALL
SELECT 'options', c.relname, array_to_string(c.reloptions, ',')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
 WHERE c.reloptions IS NOT NULL
UNION ALL
SELECT 'function', p.oid::regprocedure::text, pg_get_functiondef(p.oid)
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace AND n.nspname = 'public'
 WHERE p.prokind <> 'a'
ORDER BY 1, 2
"""


@pytest.fixture
async def empty_url(admin_url: str) -> AsyncIterator[str]:
    """A database with no schema at all (the template has one)."""
    url = await database.create_empty_database(admin_url)
    yield url
    await database.drop_test_database(admin_url, url)


CLOCK = DatabaseClock()
# A running job's row as claim_jobs returns it (claims.claimed reads it).
RUNNING = """
SELECT id, tenant_id, attempts, uncounted_attempts, max_attempts, run_token, provider, payload,
       job_name, traceparent, started_at
  FROM jobs WHERE status = 'running'
"""


async def catalog(conn: db.Conn) -> list[tuple[str, str, str]]:
    return [(r["kind"], r["name"], r["definition"]) for r in await conn.fetch(CATALOG)]


async def test_schema_applies_twice_and_records_its_version(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        # The template ran schema.sql whole: it records its header's version, or every start
        # would migrate a fresh database (a bump of the header alone did that once).
        made = await conn.fetchval("SELECT max(version) FROM schema_version")
        first = await migrations.apply_schema(conn)
        second = await migrations.apply_schema(conn)
        recorded = await conn.fetchval("SELECT max(version) FROM schema_version")
    header = migrations.schema_version(migrations.load_schema())
    assert made == first == second == recorded == header


async def test_the_default_tenant_exists(pool: asyncpg.Pool) -> None:
    assert await pool.fetchval("SELECT name FROM tenants WHERE id = 'default'") is not None


async def test_migrations_from_version_1_lead_to_exactly_schema_sql(
    pool: asyncpg.Pool, empty_url: str
) -> None:
    first, *later = migrations.migrations()
    assert first.version == 1 and [m.version for m in later] == list(range(2, 2 + len(later)))
    old = await db.connect(empty_url)
    try:
        await old.execute(first.path.read_text())
        # Money held under version 1 moves to the ledger's shards, whole; the job keeps its
        # place in the tenant's list and its idempotency key (tenant_jobs, version 12).
        job_id = await old.fetchval(
            "INSERT INTO jobs (id, tenant_id, idempotency_key, request_hash, provider, payload,"
            " max_attempts, reserved_usd) VALUES (gen_random_uuid(), 'default', 'k', 'h',"
            " 'simulated', '{}', 1, 0.5) RETURNING id"
        )
        await old.execute("UPDATE tenants SET reserved_usd = 0.5, spent_usd = 2")
        assert await migrations.apply_schema(old) == later[-1].version
        migrated = await catalog(old)
        money = await old.fetchrow("SELECT reserved_usd, spent_usd FROM tenant_balances")
        listed = await old.fetch("SELECT tenant_id, job_id, idempotency_key FROM tenant_jobs")
    finally:
        await old.close()
    async with pool.acquire() as fresh:
        assert migrated == await catalog(fresh)
    assert money is not None and (money["reserved_usd"], money["spent_usd"]) == (0.5, 2)
    assert [tuple(r) for r in listed] == [("default", job_id, "k")]


def test_no_migration_makes_a_routine() -> None:
    # Routines live in schema.sql alone and run after the migrations: a migration's own copy
    # would be a second text to keep in step (a migration's temporary helper, in pg_temp, is its
    # own business).
    routine = re.compile(
        r"CREATE\s+(OR\s+REPLACE\s+)?(FUNCTION|PROCEDURE|AGGREGATE|VIEW|TRIGGER)\s+(?!pg_temp\.)",
        re.IGNORECASE,
    )
    made = {m.path.name: routine.findall(m.path.read_text()) for m in migrations.migrations()}
    assert {name: found for name, found in made.items() if found} == {}


def test_every_routine_follows_the_routines_line() -> None:
    schema = migrations.load_schema()
    before, after = schema[: -len(migrations.routines(schema))], migrations.routines(schema)
    kinds = r"(FUNCTION|PROCEDURE|AGGREGATE|VIEW|TRIGGER)"
    assert re.search(rf"CREATE\s+(OR\s+REPLACE\s+)?{kinds}", before, re.IGNORECASE) is None
    # Each one safe to run again on a database that has it.
    statements = re.findall(rf"^CREATE\s+(?:OR\s+REPLACE\s+)?{kinds}", after, re.MULTILINE)
    assert statements and re.findall(r"^CREATE OR REPLACE", after, re.MULTILINE) == [
        "CREATE OR REPLACE"
    ] * len(statements)


async def test_the_routines_run_again_on_a_current_database_change_nothing(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        before = await catalog(conn)
        await conn.execute(migrations.routines(migrations.load_schema()))
        assert await catalog(conn) == before


async def test_a_current_schema_takes_no_lock_so_start_up_never_waits_for_workers(
    pool: asyncpg.Pool, database_url: str
) -> None:
    # Regression: start-up ran schema.sql whole, whose CREATE INDEX locked `jobs` while running
    # workers held it, and a restarting server deadlocked with the reaper and exited.
    async with pool.acquire() as holder, holder.transaction():
        await holder.execute("LOCK TABLE jobs, job_attempts, tenants IN ACCESS EXCLUSIVE MODE")
        starting = await db.connect(database_url)
        try:
            async with asyncio.timeout(5):
                await migrations.apply_schema(starting)
        finally:
            await starting.close()


async def test_two_processes_creating_the_schema_at_once_both_start(empty_url: str) -> None:
    # Regression: a server and a worker started on an empty database. The one that waited for
    # the other's schema lock read the schema's absence from its catalog cache, which the wait
    # did not refresh, and ran schema.sql again: DuplicateObjectError on its type, and a server
    # that failed to start.
    first, second = await db.connect(empty_url), await db.connect(empty_url)
    try:
        creating = first.transaction()
        await creating.start()
        await first.execute(queries.LOCK_SCHEMA, migrations.SCHEMA_LOCK_ID)
        applying = asyncio.create_task(migrations.apply_schema(second))
        pid = second.get_server_pid()

        async def waiting() -> bool:
            row = await first.fetchrow(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1", pid
            )
            return row is not None and row["wait_event_type"] == "Lock"

        await eventually(waiting, bool, what="the second process waits for the schema lock")
        await first.execute(migrations.load_schema())
        await creating.commit()
        async with asyncio.timeout(10):
            assert await applying == migrations.schema_version(migrations.load_schema())
    finally:
        await first.close()
        await second.close()


async def test_a_database_newer_than_the_code_is_refused(pool: asyncpg.Pool) -> None:
    await pool.execute("INSERT INTO schema_version (version) VALUES (999)")
    async with pool.acquire() as conn:
        with pytest.raises(migrations.SchemaTooNew, match="999"):
            await migrations.apply_schema(conn)


# A job of each kind at the upgrade, as version 19's create and claim left them: one queued, one
# running (its attempt running, its log's `reset` and `status` a row each: before version 21).
AT_VERSION_19 = """
WITH made AS (
    INSERT INTO jobs (id, tenant_id, request_hash, provider, payload, max_attempts, status,
                      attempts, run_token, lease_until, worker_id, started_at, last_seq)
    VALUES ($1, 'default', '', 'simulated', $3, 1, 'running', 1, $4,
            now() + interval '1 minute', 'w', now(), 3),
           ($2, 'default', '', 'simulated', $3, 1, 'queued', 0, NULL, NULL, NULL, NULL, 1)
    RETURNING id, tenant_id, created_at
), listed AS (
    INSERT INTO tenant_jobs (tenant_id, created_at, job_id)
    SELECT tenant_id, created_at, id FROM made
), attempt AS (
    INSERT INTO job_attempts (job_id, attempt, run_token, worker_id, started_at, provider)
    VALUES ($1, 1, $4, 'w', now(), 'simulated')
)
INSERT INTO job_events (job_id, seq, attempt, type, data)
VALUES ($1, 2, 1, 'reset', '{"attempt": 1, "reason": "first attempt"}'),
       ($1, 3, 1, 'status', '{"status": "running"}')
"""


async def upgraded_under_way(url: str, version: int) -> tuple[uuid.UUID, uuid.UUID, datetime]:
    """The tables of `version` (its migrations: this code's routines may need later columns)
    with a job running, its attempt's row written at its claim, and one queued (AT_VERSION_19);
    then the upgrade to this version. The running job, the queued one, and the running
    attempt's start as its row had it before the upgrade."""
    old = await db.connect(url)
    running, queued = uuid.uuid4(), uuid.uuid4()
    spec = JobSpec(prompt="under way", provider="simulated")
    try:
        for migration in migrations.migrations():
            text = migration.path.read_text()
            if migration.version <= version:
                if migrations.has_statements(text):
                    await old.execute(text)
                await old.execute(queries.RECORD_SCHEMA_VERSION, migration.version)
        await old.execute(AT_VERSION_19, running, queued, spec.payload(), uuid.uuid4())
        started: datetime = await old.fetchval(
            "SELECT started_at FROM job_attempts WHERE job_id = $1", running
        )
        assert await migrations.apply_schema(old) == migrations.migrations()[-1].version
    finally:
        await old.close()
    return running, queued, started


async def test_an_upgrade_from_version_19_under_way_loses_nothing(empty_url: str) -> None:
    # This version's worker statements finish both jobs of version 19.
    running, queued, _ = await upgraded_under_way(empty_url, 19)

    pool = await db.create_pool(empty_url, min_size=1, max_size=2)
    try:
        row = await pool.fetchrow(f"{RUNNING} AND id = $1", running)
        assert row is not None
        # The attempt claimed before the upgrade ends under its own run token...
        held = [claims.claimed(row)]
        usage = Usage(input_tokens=1, output_tokens=1)
        assert await attempts.accept_many(pool, [Success(held[0], "a", usage, "a")], CLOCK) == {0}
        # ... and the job queued before it is claimed and ends as any other.
        [claimed] = await claims.claim_batch(
            pool, providers=["simulated"], worker_id="w2", lease_s=30, clock=CLOCK, max_jobs=8
        )
        assert claimed.job_id == queued
        assert await attempts.accept_many(pool, [Success(claimed, "b", usage, "b")], CLOCK) == {0}
        for job_id, text in ((running, "a"), (queued, "b")):
            log = await events.read_after(pool, job_id, 0)
            last_seq = await pool.fetchval("SELECT last_seq FROM jobs WHERE id = $1", job_id)
            assert [e.seq for e in log] == list(range(1, last_seq + 1))
            assert [e.type for e in log] == ["status", "reset", "status", "token", "usage", "done"]
            assert await events.read_after(pool, job_id, 2) == log[2:]
            # The last chunk rode in the success's `done` row (job_events.earlier).
            assert (
                log[3].data == {"text": text} and await events.attempt_text(pool, job_id, 1) == text
            )
        outcomes = await pool.fetch("SELECT outcome FROM job_attempts ORDER BY started_at")
        assert [r["outcome"] for r in outcomes] == ["succeeded", "succeeded"]
        assert await pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'succeeded'") == 2
    finally:
        await pool.close()


# The claim of a worker of version 22: claim_jobs without `attempt_rows`, which inserts the
# attempt's row at the claim, as before.
CLAIM_AT_VERSION_22 = """
SELECT id, tenant_id, attempts, uncounted_attempts, max_attempts, run_token, provider, payload,
       last_seq, job_name, traceparent
  FROM claim_jobs($1::text[], $2, $3, $4::timestamptz, $5::text[], $6::int[], $7::text[], $8,
                  $9::text[], $10::float8)
"""


async def test_an_upgrade_from_version_22_under_way_loses_nothing(empty_url: str) -> None:
    # Version 22's tables with a job running (its attempt's row written at its claim) and one
    # queued; then the upgrade to attempt rows written at the end. The running attempt fails,
    # the queued job is claimed by a worker of version 22 and succeeds, and another claimed so
    # is lost with that worker and reaped: each ends the row it has, and a job claimed since
    # has its row written at its end alone.
    running, queued, started = await upgraded_under_way(empty_url, 22)

    pool = await db.create_pool(empty_url, min_size=1, max_size=2)
    try:
        # The running attempt is listed once, from the row its claim wrote.
        [attempt] = await pool.fetch(queries.SELECT_ATTEMPTS, running)
        assert (attempt["outcome"], attempt["started_at"]) == ("running", started)
        row = await pool.fetchrow(f"{RUNNING} AND id = $1", running)
        assert row is not None
        error = {"class": "invalid_request", "message": "no"}
        await attempts.fail(
            pool, claims.claimed(row), action="fail", outcome="failed", error=error,
            usage=Usage(input_tokens=2, output_tokens=0), retry_in_s=0, clock=CLOCK,
        )  # fmt: skip
        args: tuple[object, ...] = (["simulated"], "w22", 30.0, None, [], [], [], 8, ["llm"], 1.0)
        # Held as this version's code holds an attempt (claims.claimed), without the start that
        # version 22's claim does not read: its row has it.
        [claimed_row] = await pool.fetch(
            f"SELECT *, NULL::timestamptz AS started_at FROM ({CLAIM_AT_VERSION_22}) c", *args
        )
        claimed = claims.claimed(claimed_row)
        assert claimed.job_id == queued
        assert (
            await pool.fetchval("SELECT outcome FROM job_attempts WHERE job_id = $1", queued)
            == "running"
        )
        usage = Usage(input_tokens=1, output_tokens=1)
        assert await attempts.accept_many(pool, [Success(claimed, "b", usage, "b")], CLOCK) == {0}
        rows = await pool.fetch(
            "SELECT job_id, attempt, outcome, worker_id, input_tokens FROM job_attempts"
            " ORDER BY started_at"
        )
        assert [tuple(r) for r in rows] == [
            (running, 1, "failed", "w", 2),
            (queued, 1, "succeeded", "w22", 1),
        ]
        statuses = await pool.fetch("SELECT status FROM jobs ORDER BY created_at, id")
        assert sorted(r["status"] for r in statuses) == ["failed", "succeeded"]
        orphan = await create_job(pool, prompt="lost", provider="simulated", max_attempts=2)
        [lost_row] = await pool.fetch(CLAIM_AT_VERSION_22, *args)
        assert lost_row["id"] == orphan
        claimed_at = await pool.fetchval(
            "SELECT started_at FROM job_attempts WHERE job_id = $1", orphan
        )
        later = ManualClock(datetime.now(UTC) + timedelta(minutes=5))
        assert await attempts.reap_expired(pool, later) == 1
        lost = await pool.fetch(
            "SELECT outcome, worker_id, started_at FROM job_attempts WHERE job_id = $1", orphan
        )
        assert [tuple(r) for r in lost] == [("lost", "w22", claimed_at)]
        # A job claimed by this version: no row while it runs, one row at its end.
        new = await create_job(pool, prompt="after", provider="simulated")
        [held] = await claims.claim_batch(
            pool, providers=["simulated"], worker_id="w23", lease_s=30, clock=CLOCK, max_jobs=8
        )
        assert held.job_id == new
        assert await pool.fetchval("SELECT count(*) FROM job_attempts WHERE job_id = $1", new) == 0
        assert await attempts.accept_many(pool, [Success(held, "c", usage, "c")], CLOCK) == {0}
        assert (
            await pool.fetchval(
                "SELECT outcome || ' by ' || worker_id FROM job_attempts WHERE job_id = $1", new
            )
            == "succeeded by w23"
        )
    finally:
        await pool.close()
