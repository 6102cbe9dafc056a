"""Request counts and latency per model and endpoint, recorded at the ASGI edge so every outcome
(success, 4xx, 5xx) is counted once without touching the handlers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sie.observability.metrics import Metrics

_ENDPOINTS: Final = ("encode", "score", "extract")


def classify(path: str) -> tuple[str, str] | None:
    """The endpoint and model of an inference path, or None for any other route."""
    if path == "/v1/embeddings":
        return "embeddings", ""
    for endpoint in _ENDPOINTS:
        prefix = f"/v1/{endpoint}/"
        if path.startswith(prefix):
            return endpoint, path[len(prefix) :]
    return None


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


async def run_recording_status(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send, record: Callable[[int, float], None]
) -> None:
    """Run ``app`` and then ``record(status, seconds)``, also when it raised (status 500: the catch-all
    answers it so), so every outcome of a request is counted once."""
    started = time.perf_counter()
    status = 500

    async def capture(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    try:
        await app(scope, receive, capture)
    finally:
        record(status, time.perf_counter() - started)
