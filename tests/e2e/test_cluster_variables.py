"""The cluster's variables acted on by real processes: a ``sie-server`` queue worker started with
``SIE_GPU_TYPE=L4``, ``SIE_MAX_DELIVER``, ``SIE_STREAM_MAX_AGE_S`` (the public chart's values changed),
a gateway reading NATS heartbeats with ``SIE_GATEWAY_MAX_STREAM_PENDING``, and a second gateway in
``SIE_GATEWAY_HEALTH_MODE=ws`` reading the worker's ``/ws/status`` from ``SIE_GATEWAY_WORKERS``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import nats
import pytest

from sie.queue.contract import lane_consumer, pool_stream
from tests.conftest import running_nats
from tests.e2e.cluster import Gateway, _gateway_command, run_gateway, run_worker, worker_env
from tests.e2e.conftest import MINILM, Server

MAX_PENDING = 5


@dataclass
class Cluster:
    nats_url: str
    worker: Server
    gateway: Gateway  # health from NATS heartbeats
    ws_gateway: Gateway  # health from the worker's /ws/status


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("cluster-variables")
    with running_nats(root) as nats_server:
        env = worker_env(
            nats_server.url, "gpu-worker", SIE_GPU_TYPE="L4", SIE_MAX_DELIVER="3", SIE_STREAM_MAX_AGE_S="90"
        )
        gateway_env = {
            "SIE_NATS_URL": nats_server.url,
            "SIE_HEALTH_PUBLISH_INTERVAL_MS": "500",
            "SIE_STREAM_MAX_AGE_S": "90",
            "SIE_GATEWAY_MAX_STREAM_PENDING": str(MAX_PENDING),
        }
        with run_worker(root / "worker", env) as worker:
            ws_env = {
                "SIE_NATS_URL": nats_server.url,
                "SIE_GATEWAY_HEALTH_MODE": "ws",
                "SIE_GATEWAY_WORKERS": worker.url,
            }
            with (
                run_gateway(root / "gateway", gateway_env) as gateway,
                run_gateway(root / "ws-gateway", ws_env) as ws_gateway,
            ):
                gateway.wait_for_workers(1, [MINILM])
                ws_gateway.wait_for_workers(1, [MINILM])
                yield Cluster(nats_server.url, worker, gateway, ws_gateway)


def encode(gateway: Gateway, profile: str | None = None) -> object:
    headers = {"X-SIE-Machine-Profile": profile} if profile else {}
    return gateway.client.post(
        f"/v1/encode/{MINILM}",
        json={"items": [{"text": "routed by gpu type"}]},
        headers={"Accept": "application/json", "X-SIE-SDK-Version": "0.10.1", **headers},
    )


def test_the_gpu_type_is_the_workers_profile_in_the_table_and_in_routing(cluster: Cluster) -> None:
    for gateway in (cluster.gateway, cluster.ws_gateway):
        health = gateway.health()
        (worker,) = health["workers"]
        assert (worker["gpu"], worker["machine_profile"]) == ("l4", "l4")  # SIE_GPU_TYPE=L4, lower-cased
        assert health["live_gpu_types"] == ["l4"]
        response = encode(gateway, "l4")
        assert response.status_code == 200, response.text
        assert len(response.json()["items"][0]["dense"]["values"]) == 384


def test_the_worker_made_the_stream_and_consumer_its_variables_say(cluster: Cluster) -> None:
    async def read() -> tuple[float, int]:
        client = await nats.connect(cluster.nats_url)
        try:
            js = client.jetstream()
            stream = await js.stream_info(pool_stream("default"))
            consumer = await js.consumer_info(
                pool_stream("default"), lane_consumer("default", "l4", "default")
            )
            return stream.config.max_age, consumer.config.max_deliver
        finally:
            await client.close()

    assert asyncio.run(read()) == (90.0, 3)


def test_a_stream_deeper_than_max_stream_pending_is_refused_with_retry_after(cluster: Cluster) -> None:
    """Items nobody pulls (on a lane no worker serves) fill the pool's stream past
    SIE_GATEWAY_MAX_STREAM_PENDING: the gateway refuses 503 QUEUE_FULL with Retry-After 5 and
    publishes nothing; once the stream drains it serves again."""
    subject = "sie.work.default.nobody.default.some__model"

    async def fill_then(step: str) -> int:
        client = await nats.connect(cluster.nats_url)
        try:
            js = client.jetstream()
            if step == "fill":
                for _ in range(MAX_PENDING + 1):
                    await js.publish(subject, b"never pulled")
            else:
                await js.purge_stream(pool_stream("default"), subject=subject)
            return int((await js.stream_info(pool_stream("default"))).state.messages)
        finally:
            await client.close()

    assert asyncio.run(fill_then("fill")) == MAX_PENDING + 1
    time.sleep(0.1)  # past the gateway's 50 ms depth reading
    refused = encode(cluster.gateway, "l4")
    assert refused.status_code == 503, refused.text
    assert refused.headers["retry-after"] == "5" and refused.headers["x-sie-error-code"] == "QUEUE_FULL"
    assert "SIE_GATEWAY_MAX_STREAM_PENDING" in refused.text
    assert asyncio.run(fill_then("purge")) == 0
    time.sleep(0.1)
    assert encode(cluster.gateway, "l4").status_code == 200
    metric = cluster.gateway.metric("sie_gateway_rejected_requests_total", reason="queue_backpressure")
    assert metric == 1


def test_ws_mode_reads_the_worker_from_its_status_socket(cluster: Cluster) -> None:
    (worker,) = cluster.ws_gateway.health()["workers"]
    assert worker["url"] == cluster.worker.url  # only the /ws/status reader knows a worker's URL
    assert worker["healthy"] and MINILM in worker["loaded_models"]
    assert cluster.gateway.health()["workers"][0]["url"] == ""  # the NATS gateway: heartbeats
    assert "reading /ws/status of" in cluster.ws_gateway.log()


@pytest.mark.parametrize(
    ("env", "flags", "said"),
    [
        ({"SIE_GATEWAY_HEALTH_MODE": "ws"}, [], "set SIE_GATEWAY_WORKERS"),
        (
            {"SIE_GATEWAY_HEALTH_MODE": "ws", "SIE_GATEWAY_KUBERNETES": "true"},
            [],
            "does not discover workers through the Kubernetes API",
        ),
        ({}, ["--health-mode", "ws", "--kubernetes"], "does not discover workers through the Kubernetes API"),
        ({"SIE_GATEWAY_HEALTH_MODE": "websocket"}, [], "gateway_health_mode"),
    ],
)
def test_a_ws_gateway_it_cannot_run_refuses_to_start(
    env: dict[str, str], flags: list[str], said: str
) -> None:
    child = {k: v for k, v in os.environ.items() if not k.startswith("SIE_")}
    child.update({"SIE_NATS_URL": "nats://127.0.0.1:1", **env})
    done = subprocess.run(
        [*_gateway_command(), "serve", "--port", "0", *flags],
        env=child,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert said in done.stderr + done.stdout
