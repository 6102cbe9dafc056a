"""What request metrics at the ASGI edge share, in every process: which inference endpoint and model a
path names, a route's template as a label, and the one wrapper that records each outcome (success,
4xx, 5xx) once without touching the handlers."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Final

from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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


def route_template(routes: Sequence[BaseRoute], scope: Scope) -> str:
    """The path template of the route ``scope`` asks for (``other`` for none): a metric label that a
    caller's path cannot multiply."""
    for route in routes:
        if isinstance(route, Route) and route.matches(scope)[0] is not Match.NONE:
            return route.path
    return "other"
