"""Whether a process traces, and with which exporters, from the standard OTEL_* variables."""

from __future__ import annotations

import pytest

from jobstream import tracing
from jobstream.settings import Settings, SettingsError


def exporters(**env: str) -> tuple[str, ...]:
    return Settings.from_env(env).trace_exporters


def test_traces_are_off_unless_an_exporter_or_an_endpoint_is_named() -> None:
    assert exporters() == ()
    assert exporters(OTEL_TRACES_EXPORTER="none") == ()
    assert exporters(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318") == ("otlp_proto_http",)
    assert exporters(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://127.0.0.1:4318/v1/traces") == (
        "otlp_proto_http",
    )
    assert exporters(OTEL_TRACES_EXPORTER="otlp, console") == ("otlp_proto_http", "console")
    # An endpoint with traces named off stays off; the SDK's own switch wins over everything.
    assert exporters(OTEL_TRACES_EXPORTER="none", OTEL_EXPORTER_OTLP_ENDPOINT="http://x") == ()
    assert exporters(OTEL_SDK_DISABLED="true", OTEL_TRACES_EXPORTER="console") == ()


def test_an_exporter_that_is_not_installed_stops_the_start() -> None:
    with pytest.raises(SettingsError, match="no span exporter 'otlp_proto_grpc'"):
        Settings.from_env({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    with pytest.raises(SettingsError, match="no span exporter 'jaegr'"):
        Settings.from_env({"OTEL_TRACES_EXPORTER": "jaegr"})


def test_a_process_without_exporters_does_not_trace() -> None:
    tracing.configure(Settings.from_env({}))
    assert not tracing.active()
    assert tracing.traceparent() is None
