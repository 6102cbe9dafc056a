"""Probes, the root redirect and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST

router = APIRouter(tags=["health"])


@router.get("/healthz", response_class=PlainTextResponse)
@router.get("/livez", response_class=PlainTextResponse)
async def healthz() -> str:
    """Liveness: the process answers."""
    return "ok"


@router.get(
    "/readyz",
    response_class=PlainTextResponse,
    responses={
        503: {
            "description": "Draining for shutdown",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    },
)
async def readyz(request: Request) -> PlainTextResponse:
    """Readiness: 503 while draining for shutdown."""
    if request.state.lifecycle.draining:
        return PlainTextResponse("not ready", status_code=503)
    return PlainTextResponse("ok")


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    return Response(request.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
