"""The server's request counts and latency per model and endpoint (``sie_requests_total``,
``sie_request_duration_seconds{phase="total"}``), recorded at the ASGI edge."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from sie.http.metrics import classify, run_recording_status
from sie.observability.metrics import Metrics


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
            named = "unknown" if status == 404 else model  # keep label cardinality bounded
            self.metrics.requests.labels(named, endpoint, str(status)).inc()
            self.metrics.request_duration.labels(named, endpoint, "total").observe(seconds)

        await run_recording_status(self.app, scope, receive, send, record)
