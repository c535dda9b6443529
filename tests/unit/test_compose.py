"""deploy/compose.yaml runs what the fleet test runs (tests/support/fleet_topology.py): the same
command lines, the same settings, nginx in front of the servers' ports. Docker is not at hand
here, so the file is read, not run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import nginx
from tests.support.fleet_topology import (
    MIGRATE_COMMAND,
    NGINX_CONFIG,
    PER_PLACE,
    PGBOUNCER_CONFIG,
    SERVER_COMMAND,
    SERVER_ENV,
    SERVERS,
    SHARED_ENV,
    WORKER_COMMAND,
    WORKER_ENV,
    WORKERS,
    nginx_command,
    pgbouncer_command,
)
from tests.support.processes import REPO_ROOT

yaml = pytest.importorskip("yaml")  # PyYAML comes with the dev tools (schemathesis)
COMPOSE = REPO_ROOT / "deploy" / "compose.yaml"


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    parsed: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    found: dict[str, dict[str, Any]] = parsed["services"]
    return found


def mounted(service: dict[str, Any], committed: str) -> str:
    """Where the service mounts the committed file `committed` (a repository path)."""
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if (COMPOSE.parent / source).resolve() == (REPO_ROOT / committed).resolve():
            return str(target)
    raise AssertionError(f"{committed} is not mounted")


def test_the_topology_is_the_fleet_tests(services: dict[str, dict[str, Any]]) -> None:
    servers = [name for name in services if name.startswith("server-")]
    workers = [name for name in services if name.startswith("worker-")]
    assert (len(servers), len(workers)) == (SERVERS, WORKERS)
    assert {"postgres", "pgbouncer", "nginx"} <= services.keys()


def test_servers_and_workers_run_the_fleet_tests_commands_and_settings(
    services: dict[str, dict[str, Any]],
) -> None:
    for name, service in services.items():
        kind = name.split("-")[0]
        if kind not in ("server", "worker"):
            continue
        command, own = (
            (SERVER_COMMAND, SERVER_ENV) if kind == "server" else (WORKER_COMMAND, WORKER_ENV)
        )
        assert service["command"] == list(command), name
        env = {key: str(value) for key, value in service["environment"].items()}
        for key, value in {**SHARED_ENV, **own}.items():
            assert env.get(key) == value, (name, key)
        # Anything else is a per-place name (an address, a secret, the app), never a tuning
        # the test did not run.
        assert env.keys() - SHARED_ENV.keys() - own.keys() <= set(PER_PLACE), name
        assert {
            "DATABASE_URL",
            "JOBSTREAM_DIRECT_DATABASE_URL",
            "JOBSTREAM_SECRET_KEY",
        } <= env.keys()
        # DATABASE_URL through PgBouncer (its listen_port), the direct one to PostgreSQL.
        assert ":6432/" in env["DATABASE_URL"] and ":5432/" in env["JOBSTREAM_DIRECT_DATABASE_URL"]


def test_nginx_runs_the_tested_config_in_front_of_the_servers(
    services: dict[str, dict[str, Any]],
) -> None:
    proxy = services["nginx"]
    config = mounted(proxy, NGINX_CONFIG)
    assert proxy["command"][:3] == nginx_command(config, "")[:3]
    assert len(proxy["command"]) == len(nginx_command(config, "prefix"))
    ports = sorted(
        int(s["environment"]["JOBSTREAM_PORT"])
        for n, s in services.items()
        if n.startswith("server-")
    )
    assert nginx.upstream_ports((REPO_ROOT / NGINX_CONFIG).read_text()) == ports


def test_the_schema_is_migrated_first(services: dict[str, dict[str, Any]]) -> None:
    assert services["migrate"]["command"] == list(MIGRATE_COMMAND)
    for name in services:
        if name.startswith(("server-", "worker-")):
            condition = services[name]["depends_on"]["migrate"]["condition"]
            assert condition == "service_completed_successfully", name


def test_pgbouncer_runs_the_tested_ini(services: dict[str, dict[str, Any]]) -> None:
    bouncer = services["pgbouncer"]
    assert bouncer["command"] == pgbouncer_command(mounted(bouncer, PGBOUNCER_CONFIG))


def test_every_process_shares_one_loopback_as_in_the_test(
    services: dict[str, dict[str, Any]],
) -> None:
    for name, service in services.items():
        if name != "postgres":
            assert service.get("network_mode") == "service:postgres", name


def test_the_committed_configs_exist() -> None:
    for path in (NGINX_CONFIG, PGBOUNCER_CONFIG):
        assert Path(REPO_ROOT / path).is_file()
