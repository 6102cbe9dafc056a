"""Worker health from each worker's ``/ws/status`` (``SIE_GATEWAY_HEALTH_MODE=ws``): local diagnostics,
as the public gateway's WebSocket mode, beside the NATS heartbeats the chart's gateways read.

The gateway opens one WebSocket per worker URL (``SIE_GATEWAY_WORKERS``), reads the status message the
worker pushes every 200 ms and puts it in the same worker table the heartbeats feed, so routing,
``/health`` and ``/v1/models`` work alike in both modes. A worker that stops answering goes stale as a
silent heartbeat does; a closed socket is opened again after ``RECONNECT_S``. Work still travels through
NATS: only where the gateway learns which workers are up changes.

What a status message does not say is read as the worker's queue lane reads it: an empty pool,
machine profile or bundle is ``default``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Final

import msgspec

from sie.gateway.workers import WorkerTable
from sie.queue.contract import DEFAULT_LANE_TOKEN, Heartbeat

log = logging.getLogger(__name__)

RECONNECT_S: Final = 5.0  # the public gateway's reconnect delay
MAX_MESSAGE_BYTES: Final = 4 * 1024 * 1024  # a status with its counters is tens of KiB
OPEN_TIMEOUT_S: Final = 5.0


class _Gpu(msgspec.Struct):
    memory_used_bytes: int = 0
    memory_total_bytes: int = 0


class _Model(msgspec.Struct):
    queue_depth: int = 0


class _Status(msgspec.Struct):
    """The fields of a status message a gateway routes on; the rest is the worker's to show."""

    name: str = ""
    ready: bool = False
    machine_profile: str = ""
    pool_name: str = ""
    bundle: str = ""
    bundle_config_hash: str = ""
    gpu_count: int = 0
    loaded_models: list[str] = []
    models: list[_Model] = []
    gpus: list[_Gpu] = []


_STATUS: Final = msgspec.json.Decoder(_Status)


def heartbeat_of(data: bytes | str, url: str) -> Heartbeat:
    """A status message as the heartbeat the worker table keeps (``msgspec.DecodeError`` if it is none)."""
    status = _STATUS.decode(data)
    gpus = max(status.gpu_count, 1)
    return Heartbeat(
        name=status.name or url,
        ready=status.ready,
        machine_profile=status.machine_profile or DEFAULT_LANE_TOKEN,
        pool_name=status.pool_name or DEFAULT_LANE_TOKEN,
        bundle=status.bundle or DEFAULT_LANE_TOKEN,
        timestamp=time.time(),
        gpu_count=gpus,
        total_gpu_slots=gpus,
        ready_gpu_slots=gpus if status.ready else 0,
        bundle_config_hash=status.bundle_config_hash,
        loaded_models=status.loaded_models,
        queue_depth=sum(model.queue_depth for model in status.models),
        memory_used_bytes=sum(gpu.memory_used_bytes for gpu in status.gpus),
        memory_total_bytes=sum(gpu.memory_total_bytes for gpu in status.gpus),
    )


def socket_url(worker_url: str) -> str:
    """``http://host:port`` → ``ws://host:port/ws/status`` (https → wss)."""
    scheme, sep, rest = worker_url.partition("://")
    if not sep or scheme not in ("http", "https"):
        raise ValueError(f"a worker URL is http:// or https://, not {worker_url!r}")
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest.rstrip('/')}/ws/status"


class StatusFeeds:
    """One reader per worker URL, each feeding ``table`` until ``stop``."""

    def __init__(self, urls: list[str], table: WorkerTable, token: str | None) -> None:
        self._urls = {url: socket_url(url) for url in urls}
        self._table = table
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def run(self, stop: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as readers:
            for url, address in self._urls.items():
                readers.create_task(self._follow(url, address, stop), name=f"sie-gateway-status {url}")

    async def _follow(self, url: str, address: str, stop: asyncio.Event) -> None:
        from websockets.asyncio.client import connect  # uvicorn[standard]'s; only this mode needs it

        failing = False
        while not stop.is_set():
            try:
                async with connect(
                    address,
                    additional_headers=self._headers,
                    open_timeout=OPEN_TIMEOUT_S,
                    max_size=MAX_MESSAGE_BYTES,
                ) as socket:
                    if failing:
                        log.info("reading %s again", address)
                    failing = False
                    async for message in socket:
                        self._take(message, url)
            except Exception as exc:  # refused, closed, unreachable: the worker goes stale, we retry
                if not failing:
                    log.warning(
                        "worker status %s unreadable (%r); retrying every %gs", address, exc, RECONNECT_S
                    )
                failing = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), RECONNECT_S)

    def _take(self, message: bytes | str, url: str) -> None:
        try:
            self._table.update(heartbeat_of(message, url), url)
        except msgspec.DecodeError as exc:
            log.debug("ignoring a status message from %s: %s", url, exc)
