"""A PING that times out and whose PONG comes late must not end the client's reading: found by the
chaos run, where a worker partitioned for 20 s came back healthy to the gateways (its heartbeats went
out) but never pulled again (its read loop had died on nats-py's cancelled flush future). A stalled
``nats-server`` (SIGSTOP, then SIGCONT) makes the late PONG here."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import nats
import pytest

from sie.queue.connection import ping
from tests.conftest import running_nats

pytestmark = pytest.mark.asyncio


async def test_a_late_pong_leaves_the_connection_reading(tmp_path: Path) -> None:
    with running_nats(tmp_path) as server:
        assert server.process is not None
        reader = await nats.connect(server.url)
        writer = await nats.connect(server.url)
        try:
            received: asyncio.Queue[bytes] = asyncio.Queue()

            async def on_message(message: nats.aio.msg.Msg) -> None:
                await received.put(message.data)

            await reader.subscribe("late.pong", cb=on_message)
            await reader.flush()
            os.kill(server.process.pid, signal.SIGSTOP)  # the PONG of the next PING waits
            try:
                with pytest.raises(nats.errors.FlushTimeoutError):
                    await ping(reader, 1)
            finally:
                os.kill(server.process.pid, signal.SIGCONT)  # ... and comes now, late
            await ping(reader, 5)  # the late PONG was read without killing the read loop
            await writer.publish("late.pong", b"still reading")
            await writer.flush()
            assert await asyncio.wait_for(received.get(), 5) == b"still reading"
        finally:
            await reader.close()
            await writer.close()
