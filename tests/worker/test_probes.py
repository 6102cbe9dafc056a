"""The queue worker's probe port against a real nats-server: ready while NATS answers its pings,
not ready within ``SIE_WORKER_READYZ_STALE_MULT`` ping intervals of losing it, ready again after it
returns, and not ready while draining; ``/healthz`` and ``/metrics`` answer throughout."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx

from sie.queue.access import NatsAccess
from sie.queue.connection import connect
from sie.worker.probes import ProbeServer, Readiness, probe_app
from tests.conftest import running_nats
from tests.s3 import free_port


async def _wait_for(client: httpx.AsyncClient, status: int, timeout_s: float = 10) -> httpx.Response:
    deadline = time.monotonic() + timeout_s
    while True:
        response = await client.get("/readyz")
        if response.status_code == status:
            return response
        assert time.monotonic() < deadline, response.text
        await asyncio.sleep(0.05)


async def test_readiness_follows_the_nats_connection_and_the_drain(tmp_path: Path) -> None:
    draining = False
    with running_nats(tmp_path) as nats_server:
        nats = await connect(NatsAccess([nats_server.url]), "probe-test")
        readiness = Readiness(0.1, 3, lambda: draining)
        readiness.start(nats)
        port = free_port()
        probes = ProbeServer(probe_app(readiness, lambda: b"sie_up 1\n"), "127.0.0.1", port)
        await probes.start()
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
                await _wait_for(client, 200)
                nats_server.stop()
                lost = await _wait_for(client, 503)
                assert lost.json()["reasons"] == ["NATS unreachable"]
                assert (await client.get("/healthz")).status_code == 200  # alive, only not ready
                nats_server.start()
                await _wait_for(client, 200, timeout_s=20)
                draining = True
                assert (await _wait_for(client, 503)).json()["reasons"] == ["draining"]
                metrics = await client.get("/metrics")
                assert metrics.status_code == 200 and metrics.text == "sie_up 1\n"
        finally:
            await probes.stop()
            await readiness.stop()
            await nats.close()
