"""``/ws/cluster-status`` under many viewers (audit L8): one snapshot per second for all of them, so
the pools bucket is read 1 + P times a second whatever the number of connections; at most
``SIE_GATEWAY_STATUS_MAX_CONNECTIONS`` at once, the next one closed 1013 with the limit named; a
socket that only pushes, closed 1003 when a client sends to it.

The gateway runs in process under uvicorn on loopback, on a real ``nats-server`` whose JetStream API
requests a second NATS client overhears (``$JS.API.>``): every read of the pools bucket is one of
them. Viewers are real WebSocket clients (``websockets``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import nats
import pytest
import pytest_asyncio
import uvicorn
from starlette.applications import Starlette
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from sie.gateway.app import create_app
from sie.settings.gateway import GatewaySettings
from tests.conftest import NatsServer

CAP = 8
POOLS = ("alpha", "beta")

pytestmark = pytest.mark.asyncio(loop_scope="module")


@contextlib.asynccontextmanager
async def _listening(app: Starlette) -> AsyncIterator[str]:
    """``app`` under uvicorn on a free loopback port (its lifespan included): the host and port."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "uvicorn stopped before it listened"
        await asyncio.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gateway(nats_server: NatsServer) -> AsyncIterator[str]:
    """The gateway's host:port, joined to NATS, with two leased pools (P = 2)."""
    settings = GatewaySettings(nats_url=nats_server.url, gateway_status_max_connections=CAP)
    app = create_app(settings)
    async with _listening(app) as address:
        deadline = time.monotonic() + 30
        while app.state.gateway.pools is None:
            assert time.monotonic() < deadline, "the gateway never joined NATS"
            await asyncio.sleep(0.05)
        async with httpx.AsyncClient(base_url=f"http://{address}") as client:
            for name in POOLS:
                created = await client.post("/v1/pools", json={"name": name, "ttl_seconds": 600})
                assert created.status_code == 201, created.text
        yield address


@contextlib.asynccontextmanager
async def _viewers(address: str, count: int) -> AsyncIterator[list[ClientConnection]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(connect(f"ws://{address}/ws/cluster-status"))
            for _ in range(count)
        ]


async def _snapshot(viewer: ClientConnection) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(await asyncio.wait_for(viewer.recv(), 5))
    return message


class _BucketReads:
    """JetStream API requests against the pools bucket (key listings and gets), overheard on NATS."""

    def __init__(self) -> None:
        self.count = 0

    async def on_request(self, message: Any) -> None:
        if "KV_" in message.subject:
            self.count += 1

    async def per_second(self, window_s: float) -> float:
        before = self.count
        await asyncio.sleep(window_s)
        return (self.count - before) / window_s


@pytest_asyncio.fixture(loop_scope="module")
async def bucket_reads(nats_server: NatsServer) -> AsyncIterator[_BucketReads]:
    reads = _BucketReads()
    client = await nats.connect(nats_server.url)
    await client.subscribe("$JS.API.>", cb=reads.on_request)
    await client.flush()
    try:
        yield reads
    finally:
        await client.close()


async def test_every_viewer_gets_the_same_snapshot_at_the_cost_of_one(
    gateway: str, bucket_reads: _BucketReads
) -> None:
    """Six viewers cost the pools bucket what one does: the reads per second above the gateway's own
    pool sweep stay those of one snapshot a second (before: six snapshots, six times the reads), and
    the viewers are sent the very same snapshot each second."""
    quiet = await bucket_reads.per_second(3)  # the pool sweep alone
    async with _viewers(gateway, 1) as (one,):
        await _snapshot(one)
        alone = await bucket_reads.per_second(3) - quiet
    assert alone >= 1 + len(POOLS) - 0.5, (quiet, alone)  # the snapshot does read the bucket
    async with _viewers(gateway, 6) as six:
        for viewer in six:
            await _snapshot(viewer)
        many = await bucket_reads.per_second(3) - quiet
        assert many < 2 * alone + 2, (quiet, alone, many)
        # Drained to the same tick: each viewer's next message is the snapshot all of them get.
        latest = [await _snapshot(viewer) for viewer in six]
        while len({round(message["timestamp"], 6) for message in latest}) > 1:
            newest = max(message["timestamp"] for message in latest)
            latest = [
                message if message["timestamp"] == newest else await _snapshot(viewer)
                for message, viewer in zip(latest, six, strict=True)
            ]
            assert all(message["timestamp"] <= newest for message in latest), "snapshots are per viewer"
    assert {pool["name"] for pool in latest[0]["pools"]} >= set(POOLS)


async def test_connections_past_the_cap_are_closed_with_the_limit_named(gateway: str) -> None:
    """The ninth viewer of a gateway that allows eight is closed 1013 (try again later), the reason
    naming the setting; once a viewer leaves, a new one is served."""
    async with _viewers(gateway, CAP) as viewers:
        for viewer in viewers:
            await _snapshot(viewer)
        async with connect(f"ws://{gateway}/ws/cluster-status") as extra:
            with pytest.raises(ConnectionClosed) as closed:
                await _snapshot(extra)
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == 1013
        assert "SIE_GATEWAY_STATUS_MAX_CONNECTIONS" in closed.value.rcvd.reason
        assert f"{CAP}" in closed.value.rcvd.reason
        await viewers[0].close()
        deadline = time.monotonic() + 5
        while True:  # the slot is free as soon as the gateway sees the close
            async with connect(f"ws://{gateway}/ws/cluster-status") as again:
                try:
                    assert "workers" in await _snapshot(again)
                    break
                except ConnectionClosed:
                    assert time.monotonic() < deadline, "the left viewer's slot never came back"
            await asyncio.sleep(0.1)
        for viewer in viewers[1:]:
            assert "workers" in await _snapshot(viewer)


async def test_a_viewer_that_sends_is_closed(gateway: str) -> None:
    """The socket only pushes: what a client sends is not buffered for nobody to read, the socket is
    closed 1003 (unsupported data) instead."""
    async with connect(f"ws://{gateway}/ws/cluster-status") as viewer:
        await _snapshot(viewer)
        await viewer.send("x" * 1_000_000)
        with pytest.raises(ConnectionClosed) as closed:
            for _ in range(5):
                await _snapshot(viewer)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1003
