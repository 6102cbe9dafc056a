"""OpenTelemetry tracing: one trace per request, from the gateway through NATS to the worker's engine.

Off unless ``SIE_TRACING_ENABLED`` is true; then each process exports its spans over OTLP/gRPC, and the
standard ``OTEL_*`` variables configure it as the SDK defines them (``OTEL_EXPORTER_OTLP_ENDPOINT``,
default ``localhost:4317``; ``OTEL_SERVICE_NAME``; ``OTEL_RESOURCE_ATTRIBUTES``; ``OTEL_TRACES_SAMPLER``;
``OTEL_BSP_*`` for batching). Off, nothing here runs on a request: callers test ``enabled()`` first.

The spans: ``gateway.<op>`` (the HTTP request at a gateway) → ``worker.<op>`` (a work item, parented by
the W3C ``traceparent`` the gateway put in it) → ``<op>`` (the engine call, the same on the standalone
server) → ``tokenize``, ``queue``, ``forward``, ``postprocess``: the phases the engine measured for the
call, laid end to end before the answer. Log records carry the current ``trace_id`` and the
``request_id`` being served (``TraceLogFilter``), so a JSON log line finds its trace.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Final

from opentelemetry import context, trace
from opentelemetry.trace import Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sie.wire.responses import Timing

REQUEST_ID: ContextVar[str | None] = ContextVar("sie_request_id", default=None)
_PROPAGATOR: Final = TraceContextTextMapPropagator()
_state: dict[str, Any] = {"provider": None}


def enabled() -> bool:
    return _state["provider"] is not None


def setup(default_service: str, wanted: bool) -> bool:
    """Install the SDK's tracer provider when ``wanted`` (``SIE_TRACING_ENABLED``); returns whether it did."""
    if not wanted or enabled():
        return enabled()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; the default only fills in.
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or default_service})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _state["provider"] = provider
    logging.getLogger(__name__).info(
        "tracing to %s", os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4317")
    )
    return True


def shutdown() -> None:
    """Export what is buffered (on stop)."""
    provider = _state["provider"]
    if provider is not None:
        provider.shutdown()


def _tracer() -> trace.Tracer:
    return trace.get_tracer("sie")


@contextmanager
def span(
    name: str, kind: SpanKind = SpanKind.INTERNAL, parent: context.Context | None = None, **attributes: Any
) -> Iterator[Span]:
    with _tracer().start_as_current_span(name, context=parent, kind=kind) as current:
        for key, value in attributes.items():
            if value is not None:
                current.set_attribute(key, value)
        yield current


def inject() -> dict[str, str]:
    """The current span as W3C headers (``traceparent``, maybe ``tracestate``)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier


def extract(traceparent: str | None, tracestate: str | None = None) -> context.Context | None:
    if not traceparent:
        return None
    carrier = {"traceparent": traceparent, **({"tracestate": tracestate} if tracestate else {})}
    return _PROPAGATOR.extract(carrier)


def record_phases(current: Span, timing: Timing) -> None:
    """The engine's measured phases as child spans of ``current``, ending now, and as attributes."""
    phases = [
        ("tokenize", timing.tokenization_ms),
        ("queue", timing.queue_ms),
        ("forward", timing.inference_ms),
        ("postprocess", timing.postprocessing_ms or 0.0),
    ]
    for name, ms in phases:
        current.set_attribute(f"timing.{name}_ms", ms)
    parent = trace.set_span_in_context(current)
    end = time.time_ns()
    start = end - int(sum(ms for _, ms in phases) * 1e6)
    for name, ms in phases:
        stop = start + int(ms * 1e6)
        child = _tracer().start_span(name, context=parent, start_time=start)
        child.end(end_time=stop)
        start = stop


class TraceLogFilter(logging.Filter):
    """Adds ``trace_id`` (of the current span) and ``request_id`` (being served) to each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            request_id = REQUEST_ID.get()
            if request_id is not None:
                record.request_id = request_id
        if not hasattr(record, "trace_id"):
            found = trace.get_current_span().get_span_context()
            if found.is_valid:
                record.trace_id = format(found.trace_id, "032x")
        return True
