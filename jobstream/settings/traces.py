"""OpenTelemetry traces: off unless the standard OTEL_* variables name an exporter.

Only the variables that decide whether a process traces, and with which exporters, are read
here; the SDK and the exporters read the rest themselves (OTEL_SERVICE_NAME,
OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER, OTEL_EXPORTER_OTLP_HEADERS, OTEL_BSP_*...), as
every OpenTelemetry SDK does. jobstream/tracing.py builds the provider from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import entry_points

from jobstream.settings.fields import setting

# The group every exporter package registers its span exporters in, by name: the names
# OTEL_TRACES_EXPORTER takes (`console` is the SDK's, `otlp_proto_http` the OTLP exporter's).
EXPORTER_GROUP = "opentelemetry_traces_exporter"
# `otlp` is the spec's name for the OTLP exporter, whose transport the protocol variables choose.
# jobstream ships the HTTP/protobuf one (the spec's default protocol); gRPC is the exporter
# package opentelemetry-exporter-otlp-proto-grpc, installed by whoever asks for it.
_OTLP_BY_PROTOCOL = {"http/protobuf": "otlp_proto_http", "grpc": "otlp_proto_grpc"}


@dataclass(frozen=True)
class TraceSettings:
    otel_sdk_disabled: bool = setting(
        "OTEL_SDK_DISABLED", False, "true: no traces, whatever the other OTEL_* variables say."
    )
    otel_traces_exporter: str | None = setting(
        "OTEL_TRACES_EXPORTER",
        None,
        "Span exporters, comma-separated: `otlp`, `console`, or any installed exporter's name; "
        "`none`: no traces. Unset: `otlp` when an OTLP endpoint is set, else no traces (off by "
        'default, unlike the SDK\'s own default; docs/deployment.md, "Traces").',
    )
    otel_exporter_otlp_endpoint: str | None = setting(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        None,
        "The OTLP collector's base URL (the exporter adds /v1/traces); setting it turns traces "
        "on with the `otlp` exporter.",
    )
    otel_exporter_otlp_traces_endpoint: str | None = setting(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        None,
        "The OTLP collector's traces URL, whole; setting it turns traces on with `otlp`.",
    )
    otel_exporter_otlp_protocol: str | None = setting(
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        None,
        "`http/protobuf` (what jobstream ships; the default) or `grpc` (install "
        "opentelemetry-exporter-otlp-proto-grpc).",
    )
    otel_exporter_otlp_traces_protocol: str | None = setting(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        None,
        "OTEL_EXPORTER_OTLP_PROTOCOL for traces alone.",
    )

    @property
    def trace_exporters(self) -> tuple[str, ...]:
        """The exporters' entry-point names; empty: the process does not trace."""
        if self.otel_sdk_disabled:
            return ()
        named = self.otel_traces_exporter
        if named is None:
            endpoint = self.otel_exporter_otlp_traces_endpoint or self.otel_exporter_otlp_endpoint
            named = "otlp" if endpoint else "none"
        names = [name.strip() for name in named.split(",") if name.strip()]
        if not names or names == ["none"]:
            return ()
        protocol = (
            self.otel_exporter_otlp_traces_protocol
            or self.otel_exporter_otlp_protocol
            or "http/protobuf"
        ).strip()
        return tuple(
            _OTLP_BY_PROTOCOL.get(protocol, f"otlp ({protocol})") if name == "otlp" else name
            for name in names
        )


def problems(settings: TraceSettings) -> list[str]:
    """An exporter named that no installed package provides stops the start, as any bad value
    does: traces asked for and silently not sent would be found out only when needed."""
    found = []
    installed = (
        {ep.name for ep in entry_points(group=EXPORTER_GROUP)} if _asked(settings) else set()
    )
    for name in settings.trace_exporters:
        if name not in installed:
            found.append(
                f"OTEL_TRACES_EXPORTER: no span exporter {name!r} is installed "
                f"(installed: {', '.join(sorted(installed)) or 'none'})"
            )
    return found


def _asked(settings: TraceSettings) -> bool:
    # Entry points are read only when traces are asked for: with traces off, a start reads
    # no package metadata.
    return bool(settings.trace_exporters)
