"""A PING that times out and whose PONG comes late must not end the client's reading: found by the
chaos run, where a worker partitioned for 20 s came back healthy to the gateways (its heartbeats went
out) but never pulled again (its read loop had died on nats-py's cancelled flush future). A stalled
``nats-server`` (SIGSTOP, then SIGCONT) makes the late PONG here."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import nats
import pytest

from sie.queue.connection import ping
from tests.conftest import running_nats

pytestmark = pytest.mark.asyncio


async def stopped(pid: int, timeout_s: float = 5.0) -> None:
    """Until the kernel reports ``pid`` stopped (state ``T`` in /proc/PID/stat)."""
    deadline = time.monotonic() + timeout_s
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        assert time.monotonic() < deadline, f"process {pid} did not stop"
        await asyncio.sleep(0.01)


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
            await stopped(server.process.pid)  # SIGSTOP lands asynchronously: a PING sent first is answered
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
