"""uvicorn with the drain put before the close.

On its own, uvicorn closes the listening socket the moment SIGTERM arrives, so a load balancer polling
``/readyz`` never sees a 503, only refused connections, while it may still be routing to us. Here the
first SIGTERM starts ``Lifecycle.drain`` with the listener open and tells uvicorn to stop only when the
drain is over; uvicorn then closes the listener, waits briefly for the connections it still has and
runs the lifespan shutdown (which unloads the models). The process then exits 0: a drained shutdown is
a clean one. SIGINT and a second SIGTERM keep uvicorn's own behaviour (stop now, and force on a repeat).
"""

from __future__ import annotations

import asyncio
import signal
import socket
from types import FrameType

import uvicorn

from sie.server.lifecycle import Lifecycle


class GracefulServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, lifecycle: Lifecycle) -> None:
        super().__init__(config)
        self.lifecycle = lifecycle
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and not self.lifecycle.draining and self._loop is not None:
            # Not recorded in uvicorn's captured signals: it would re-raise SIGTERM after a clean
            # shutdown and the process would end by the signal instead of exiting 0.
            self.lifecycle.begin_drain()  # /readyz answers 503 from this instant
            self._loop.call_soon_threadsafe(self._start_drain)
            return
        super().handle_exit(sig, frame)

    def _start_drain(self) -> None:
        self._drain_task = asyncio.ensure_future(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        try:
            await self.lifecycle.drain()
        finally:
            self.should_exit = True
