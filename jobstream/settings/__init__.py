"""Configuration: one typed, validated object, read from the environment at the edge.

Every field names its environment variable, default and unit; they are declared by concern
(process.py, server.py, worker.py, providers.py) and composed here into the one `Settings`.
`Settings.from_env()` reports every bad value at once with a clear message instead of a traceback.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobstream.settings import environment, process, providers, traces, worker
from jobstream.settings.fields import SettingsError
from jobstream.settings.process import LOG_LEVELS, ProcessSettings
from jobstream.settings.providers import PROVIDER_NAMES, ProviderSettings, parse_provider_limits
from jobstream.settings.server import ServerSettings
from jobstream.settings.traces import TraceSettings
from jobstream.settings.worker import WorkerSettings

__all__ = ["LOG_LEVELS", "PROVIDER_NAMES", "Settings", "SettingsError", "parse_provider_limits"]


# A dataclass takes its bases' fields last base first: the fields, and describe(), read process,
# server, worker, providers, traces.
@dataclass(frozen=True)
class Settings(TraceSettings, ProviderSettings, WorkerSettings, ServerSettings, ProcessSettings):
    def __post_init__(self) -> None:
        problems = [
            *process.problems(self), *worker.problems(self), *providers.problems(self),
            *traces.problems(self),
        ]  # fmt: skip
        if problems:
            raise SettingsError("; ".join(problems))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        env = os.environ if environ is None else environ
        values, problems = environment.read_values(dataclasses.fields(cls), env)
        problems += [f"{name} {why}" for name, why in providers.REMOVED.items() if name in env]
        if problems:
            raise SettingsError("invalid configuration: " + "; ".join(problems))
        values.update(overrides)
        return cls(**values)

    @classmethod
    def unknown_names(cls, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """Each JOBSTREAM_* variable that no setting reads (a misspelling, most likely: it would
        be ignored without a word), with a warning naming the nearest known name."""
        env = os.environ if environ is None else environ
        return environment.unknown_names(dataclasses.fields(cls), env)

    @classmethod
    def for_process(cls, program: str) -> Settings | None:
        """Settings for the server's and the worker's processes: None (after one clear line on
        stderr) when they are invalid or name no database, so the caller exits with 2."""
        try:
            settings = cls.from_env()
        except SettingsError as exc:
            print(f"jobstream {program}: {exc}", file=sys.stderr)
            return None
        for warning in cls.unknown_names().values():
            print(f"jobstream {program}: warning: {warning}", file=sys.stderr)
        if settings.database_url is None:
            print(
                f"jobstream {program}: DATABASE_URL is not set "
                "(`make run` starts a local database and sets it)",
                file=sys.stderr,
            )
            return None
        return settings

    @property
    def worker_stale_after_s(self) -> float:
        """How old a worker's heartbeat may be before the dashboard calls it stale: the setting,
        or two lease ticks (a worker beats with its renewals, every third of a lease)."""
        if self.heartbeat_window_s is not None:
            return self.heartbeat_window_s
        return 2 * self.lease_s / 3

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    @classmethod
    def describe(cls) -> str:
        """One line per setting, for `--help` and the README."""
        lines = []
        for f in dataclasses.fields(cls):
            lines.append(f"{f.metadata['env']:<36} default {f.default!r:<28} {f.metadata['doc']}")
        return "\n".join(lines)
