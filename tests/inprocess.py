"""A real app in this process: its lifespan run once, its state handed to each request as uvicorn
would, and an ``httpx`` client over ``ASGITransport`` (no socket, no subprocess); and this process's
resident memory, for tests that a hostile request leaves it flat."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
from starlette.applications import Starlette
from starlette.types import Receive, Scope, Send


@contextlib.asynccontextmanager
async def served(
    app: Starlette, base_url: str = "http://sie", timeout: float = 60
) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app) as state:

        async def with_state(scope: Scope, receive: Receive, send: Send) -> None:
            scope["state"] = dict(state or {})
            await app(scope, receive, send)

        transport = httpx.ASGITransport(app=with_state)
        async with httpx.AsyncClient(transport=transport, base_url=base_url, timeout=timeout) as client:
            yield client


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")
