"""Server-Sent Events for the generation routes: one ``data: <json>`` line per event, a ``: keep-alive``
comment while a long prefill produces nothing (so proxies do not drop the idle connection), and the
``data: [DONE]`` terminator, as the public server and OpenAI send them.

The generation is closed whatever ends the stream: its last event, an error, or the client going away
(Starlette cancels the response's task, and the ``finally`` here cancels the request in the batch).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Final, TypeVar

from starlette.responses import StreamingResponse

from sie.engine.ops.generate import Running

E = TypeVar("E")

KEEP_ALIVE_S: Final = 15.0
KEEP_ALIVE: Final = b": keep-alive\n\n"
DONE: Final = b"data: [DONE]\n\n"
SSE_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def data(payload: bytes) -> bytes:
    return b"data: " + payload + b"\n\n"


async def with_keep_alive(events: AsyncIterator[E], every_s: float = KEEP_ALIVE_S) -> AsyncIterator[E | None]:
    """``events``, with a None whenever ``every_s`` pass without one (the caller sends a keep-alive)."""
    pending: asyncio.Future[E] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(events))
            done, _ = await asyncio.wait({pending}, timeout=every_s)
            if not done:
                yield None
                continue
            try:
                event = pending.result()
            except StopAsyncIteration:
                return
            finally:
                pending = None
            yield event
    finally:
        if pending is not None:
            pending.cancel()


def event_stream(
    running: Running, render: Callable[[Running], AsyncIterator[bytes]], headers: dict[str, str]
) -> StreamingResponse:
    """The response streaming ``render``'s lines, with the generation closed at the end."""

    async def body() -> AsyncIterator[bytes]:
        try:
            async for line in render(running):
                yield line
        finally:
            running.close()

    return StreamingResponse(body(), media_type="text/event-stream", headers=SSE_HEADERS | headers)
