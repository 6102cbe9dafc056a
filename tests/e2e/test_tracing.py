"""One request, one trace: the gateway's span, the worker's (parented through the ``traceparent`` the
gateway put in the work item, across NATS), the engine's and its forward pass, all received by a real
OTLP/gRPC trace service (built from opentelemetry-proto's service definition) from two processes; and
the worker's JSON log lines carry the trace id and the request id."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from tests.conftest import running_nats
from tests.e2e.cluster import run_gateway, run_worker, worker_env
from tests.e2e.conftest import MINILM


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def Export(self, request: Any, context: Any) -> Any:  # the gRPC method's name
        for resource_spans in request.resource_spans:
            attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    with self._lock:
                        self.spans.append(
                            {
                                "service": attributes.get("service.name"),
                                "name": span.name,
                                "trace": span.trace_id.hex(),
                                "id": span.span_id.hex(),
                                "parent": span.parent_span_id.hex(),
                                "attributes": {a.key: _value(a.value) for a in span.attributes},
                            }
                        )
        return trace_service_pb2.ExportTraceServiceResponse()

    def named(self, name: str) -> list[dict[str, Any]]:
        with self._lock:
            return [s for s in self.spans if s["name"] == name]


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@contextlib.contextmanager
def otlp_receiver() -> Iterator[tuple[Receiver, str]]:
    receiver = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield receiver, f"http://127.0.0.1:{port}"
    finally:
        server.stop(grace=None)


def wait_for(receiver: Receiver, name: str, timeout_s: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while not receiver.named(name):
        assert time.monotonic() < deadline, f"no {name} span; got {[s['name'] for s in receiver.spans]}"
        time.sleep(0.1)
    return receiver.named(name)[-1]


def test_one_request_is_one_trace_from_the_gateway_through_nats_to_the_forward(tmp_path: Path) -> None:
    with otlp_receiver() as (receiver, endpoint), running_nats(tmp_path) as nats:
        tracing = {
            "SIE_TRACING_ENABLED": "true",
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        worker = {**worker_env(nats.url, "w1"), **tracing, "SIE_LOG_JSON": "true", "SIE_LOG_LEVEL": "DEBUG"}
        gateway_env = {"SIE_NATS_URL": nats.url, "SIE_HEALTH_PUBLISH_INTERVAL_MS": "500", **tracing}
        with (
            run_worker(tmp_path / "w1", worker) as w1,
            run_gateway(tmp_path / "gateway", gateway_env) as gateway,
        ):
            gateway.wait_for_workers(1, [MINILM])
            response = gateway.client.post(
                f"/v1/encode/{MINILM}",
                json={"items": [{"text": "follow me"}]},
                headers={"accept": "application/json"},
            )
            assert response.status_code == 200, response.text
            request_id = response.headers["x-sie-request-id"]
            forward = wait_for(receiver, "forward")
            front = wait_for(receiver, "gateway.encode")
            item = wait_for(receiver, "worker.encode")
            engine = wait_for(receiver, "encode")
            logs = [json.loads(line) for line in w1.log().splitlines() if line.startswith("{")]

    assert front["service"] == "sie-gateway" and item["service"] == engine["service"] == "sie-server"
    assert front["parent"] == ""  # the request's root
    assert item["trace"] == front["trace"] and item["parent"] == front["id"]  # across NATS
    assert engine["trace"] == front["trace"] and engine["parent"] == item["id"]
    assert forward["trace"] == front["trace"] and forward["parent"] == engine["id"]
    phases = {s["name"] for s in receiver.spans if s["parent"] == engine["id"]}
    assert phases == {"tokenize", "queue", "forward", "postprocess"}
    assert front["attributes"]["model"] == MINILM and front["attributes"]["http.status_code"] == 200
    assert engine["attributes"]["batch_size"] == 1 and engine["attributes"]["timing.forward_ms"] > 0
    assert item["attributes"]["worker_id"] == "w1"
    answered = [line for line in logs if line.get("request_id") == request_id]
    assert answered and all(line["trace_id"] == front["trace"] for line in answered), logs[-5:]
