"""Fixtures shared by every tier: PostgreSQL, a fresh database per test, settings, a pool."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from jobstream import db, ports
from jobstream.embedded_pg import EmbeddedPostgres
from jobstream.settings import Settings
from tests.support import database
from tests.support.database import DatabaseSupply


def pytest_configure(config: pytest.Config) -> None:
    # Each xdist worker starts servers on ports from a slice of its own (jobstream/ports.py).
    worker, count = (
        os.environ.get("PYTEST_XDIST_WORKER"),
        os.environ.get("PYTEST_XDIST_WORKER_COUNT"),
    )
    if worker and count:
        ports.partition(int(worker.removeprefix("gw")), int(count))


@pytest.fixture(scope="session")
def postgres() -> Iterator[tuple[str, EmbeddedPostgres | None]]:
    """(admin URL, the embedded server or None). Tests that restart PostgreSQL need the server."""
    with database.postgres_server() as server:
        yield server


@pytest.fixture(scope="session")
def admin_url(postgres: tuple[str, EmbeddedPostgres | None]) -> str:
    return postgres[0]


@pytest.fixture(scope="session")
async def template_ready(admin_url: str) -> None:
    await database.create_template(admin_url)


@pytest.fixture(scope="session")
async def database_supply(admin_url: str, template_ready: None) -> AsyncIterator[DatabaseSupply]:
    supply = database.DatabaseSupply(admin_url)
    yield supply
    await supply.close()


@pytest.fixture
async def database_url(admin_url: str, database_supply: DatabaseSupply) -> AsyncIterator[str]:
    """A fresh database from the template, dropped after the test."""
    url = await database_supply.take()
    yield url
    await database.drop_test_database(admin_url, url)


@pytest.fixture
def settings(database_url: str) -> Settings:
    """Settings for tests: short intervals so nothing waits on wall-clock defaults."""
    return Settings(
        database_url=database_url,
        port=0,
        poll_interval_s=0.2,
        lease_s=30.0,
        backoff_base_s=0.0,
        backoff_max_s=0.0,
        shutdown_grace_s=2.0,
        hub_recheck_s=1.0,
        sse_heartbeat_s=15.0,
        log_json=True,
        secret_key="test-secret",
        # Unset, the cap on a tenant's streams follows this process's open-file limit: a test of
        # many streams (all the `default` tenant's) must not depend on the machine's.
        tenant_max_streams=10_000,
    )


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await db.create_pool(database_url, min_size=1, max_size=10)
    yield pool
    await pool.close()
