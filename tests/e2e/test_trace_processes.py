"""Traces from real processes: a server and a worker, each configured by OTEL_* alone, export
over OTLP/HTTP to a loopback collector, and one job's spans from both form one tree."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.e2e.conftest import Stack
from tests.support.polling import eventually
from tests.support.processes import Processes

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


@dataclass(frozen=True)
class Exported:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root
    attributes: dict[str, str]


class Collector:
    """An OTLP/HTTP traces endpoint on loopback that keeps what it is sent."""

    def __init__(self) -> None:
        self.spans: list[Exported] = []
        collector = self

        class Receive(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                collector.keep(body)
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receive)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def keep(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource in request.resource_spans:
            service = next(
                a.value.string_value
                for a in resource.resource.attributes
                if a.key == "service.name"
            )
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        Exported(
                            service, span.name, span.trace_id.hex(), span.span_id.hex(),
                            span.parent_span_id.hex(),
                            {a.key: a.value.string_value for a in span.attributes},
                        )
                    )  # fmt: skip

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def collector() -> Iterator[Collector]:
    received = Collector()
    yield received
    received.close()


async def test_a_server_and_a_worker_process_export_one_jobs_spans_in_one_tree(
    process_group: Processes, database_url: str, collector: Collector
) -> None:
    stack = Stack(process_group, database_url)
    stack.env |= {
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # export within 0.1 s, not the default 5
    }
    try:
        await stack.start()
        response = await stack.http.post(
            "/api/jobs",
            json={"prompt": "one two", "simulate": {"tokens": 3, "tokens_per_second": 0}},
            headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"},
        )
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]

        async def names() -> set[str]:
            return {s.name for s in collector.spans if s.trace_id == CLIENT_TRACE}

        await eventually(
            names,
            lambda seen: {"POST /api/jobs", "job.claim", "job.attempt", "llm.call"} <= seen,
            what="the job's four spans exported",
            timeout_s=20,
        )
    finally:
        await stack.aclose()
    spans = {s.name: s for s in collector.spans if s.trace_id == CLIENT_TRACE}
    create, claim, attempt, call = (
        spans[name] for name in ("POST /api/jobs", "job.claim", "job.attempt", "llm.call")
    )
    assert create.parent_id == CLIENT_SPAN
    assert claim.parent_id == attempt.parent_id == create.span_id
    assert call.parent_id == attempt.span_id
    assert attempt.attributes["jobstream.job.id"] == claim.attributes["jobstream.job.id"] == job_id
    # Neither process was given OTEL_SERVICE_NAME: both name themselves jobstream.
    assert {s.service for s in (create, claim, attempt, call)} == {"jobstream"}
