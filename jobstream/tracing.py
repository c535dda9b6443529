"""OpenTelemetry traces of a job, from its create to its result, across processes.

Off by default: `_tracer` stays None and every caller checks `active()` (a global's read) before
it makes anything, so a process that does not trace builds no span, no context and imports no
SDK. On when the settings name an exporter (jobstream/settings/traces.py, the standard OTEL_*
variables): `configure` builds the SDK's TracerProvider, which reads the rest of OTEL_* itself.

The trace crosses processes through the database, not through memory: the server stores the
create span's W3C traceparent with the job (jobs.traceparent, written by INSERT_JOBS), the claim
hands it to the worker, and the worker's claim and attempt spans are its children; each provider
call and step is a child of its attempt (asyncio tasks copy the context, so spans started inside
the attempt's task nest under it). docs/deployment.md, "Traces", lists the spans and attributes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from jobstream.claims import Claimed
    from jobstream.settings.traces import TraceSettings

# The instrumentation scope every span of ours carries.
SCOPE = "jobstream"

_tracer: Tracer | None = None
_propagator = TraceContextTextMapPropagator()


def active() -> bool:
    """Whether this process traces: the one check the hot paths pay when it does not."""
    return _tracer is not None


def configure(settings: TraceSettings) -> None:
    """At a process's start: trace with the exporters the settings name, or not at all. The
    provider is also made the global one, so that spans a job's own code starts with
    `opentelemetry.trace.get_tracer(...)` join the attempt's trace."""
    names = settings.trace_exporters
    if not names:
        return
    # Imported only here: a process that does not trace never loads the SDK.
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; the provider reads
    # OTEL_TRACES_SAMPLER; each exporter its own OTEL_EXPORTER_* variables; the batch processor
    # OTEL_BSP_*: the SDK's standard environment, not one of ours.
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        # Named by neither OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES, which must win: an
        # attribute given to Resource.create would override theirs.
        resource = resource.merge(Resource({"service.name": "jobstream"}))
    provider = TracerProvider(resource=resource)
    for name in names:
        (found,) = entry_points(group="opentelemetry_traces_exporter", name=name)
        provider.add_span_processor(BatchSpanProcessor(found.load()()))
    trace.set_tracer_provider(provider)
    use(provider)


def use(provider: TracerProvider | None) -> None:
    """Trace with `provider` (None: stop tracing). The tests' way in, with an in-memory
    exporter, and configure's."""
    global _tracer
    _tracer = None if provider is None else provider.get_tracer(SCOPE)


def traceparent() -> str | None:
    """The current span's context as a W3C traceparent, to store with a job; None when there
    is no span (traces off, or a create path that does not trace)."""
    if _tracer is None:
        return None
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent")


@contextmanager
def server_span(name: str, headers: Mapping[str, str], method: str, path: str) -> Iterator[Span]:
    """A request's span, continuing the client's trace when it sent a `traceparent` header."""
    assert _tracer is not None, "only while tracing"
    parent = _propagator.extract(headers)
    attributes = {"http.request.method": method, "url.path": path}
    with _tracer.start_as_current_span(
        name, context=parent, kind=SpanKind.SERVER, attributes=attributes
    ) as span:
        yield span


def claim_span(held: Claimed, start_ns: int, end_ns: int, batch: int) -> None:
    """The claim of one job, in the job's trace: a claim takes several jobs in one statement,
    so each job's trace gets a span of its own over the statement's time."""
    assert _tracer is not None, "only while tracing"
    span = _tracer.start_span(
        "job.claim",
        context=_stored(held.traceparent),
        kind=SpanKind.INTERNAL,
        attributes={**_job_attributes(held), "jobstream.claim.batch_size": batch},
        start_time=start_ns,
    )
    span.end(end_time=end_ns)


@contextmanager
def attempt_span(held: Claimed) -> Iterator[Span]:
    """An attempt's span, current while it runs: its parent is the context the create stored
    with the job (another process's span), never anything of this process."""
    assert _tracer is not None, "only while tracing"
    with _tracer.start_as_current_span(
        "job.attempt",
        context=_stored(held.traceparent),
        kind=SpanKind.CONSUMER,
        attributes=_job_attributes(held),
    ) as span:
        yield span


@contextmanager
def child_span(name: str, attributes: Mapping[str, str | int | bool]) -> Iterator[Span]:
    """A span under the current one (an attempt's provider call or step)."""
    assert _tracer is not None, "only while tracing"
    kind = SpanKind.CLIENT if name == "llm.call" else SpanKind.INTERNAL
    with _tracer.start_as_current_span(name, kind=kind, attributes=attributes) as span:
        yield span


def failed(span: Span, description: str) -> None:
    """Mark `span` as failed without an exception (an attempt that ended failed, a 4xx/5xx)."""
    span.set_status(Status(StatusCode.ERROR, description))


def _stored(traceparent: str | None) -> Context:
    # No stored context (a job created while the server did not trace): the span starts a trace
    # of its own, rather than joining whatever happens to be current in the worker.
    if traceparent is None:
        return trace.set_span_in_context(trace.INVALID_SPAN)
    return _propagator.extract({"traceparent": traceparent})


def _job_attributes(held: Claimed) -> dict[str, str | int]:
    return {
        "jobstream.job.id": str(held.job_id),
        "jobstream.job.name": held.job_name,
        "jobstream.job.attempt": held.attempt,
        "jobstream.job.run_token": str(held.run_token),
        "jobstream.tenant.id": held.tenant_id,
        "jobstream.provider": held.provider,
    }
