"""The server's request counts and latency per model and endpoint (``sie_requests_total``,
``sie_request_duration_seconds{phase="total"}``), recorded at the ASGI edge.

The ``model`` label is a model the catalogue serves, else ``unknown``, whatever the status: a path
is the caller's to choose (a 405, a 413 or a 503 while draining names any path), and a label made
from it would let anyone add series to ``/metrics`` without bound."""

from __future__ import annotations

from typing import Final

from starlette.types import ASGIApp, Receive, Scope, Send

from sie.engine.engine import Engine
from sie.http.metrics import classify, run_recording_status
from sie.observability.metrics import Metrics

UNKNOWN: Final = "unknown"


def model_label(scope: Scope, model: str) -> str:
    """``model`` when the running engine's catalogue has it (the lifespan's ``engine``), else ``unknown``."""
    engine = scope.get("state", {}).get("engine")
    return model if isinstance(engine, Engine) and model in engine.catalog else UNKNOWN


class RequestMetrics:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = classify(scope.get("path", "")) if scope["type"] == "http" else None
        if target is None:
            await self.app(scope, receive, send)
            return
        endpoint, model = target

        def record(status: int, seconds: float) -> None:
            named = model_label(scope, model) if model else ""
            metrics = self.metrics
            metrics.labelled(metrics.requests, named, endpoint, str(status)).inc()
            metrics.labelled(metrics.request_duration, named, endpoint, "total").observe(seconds)

        await run_recording_status(self.app, scope, receive, send, record)
