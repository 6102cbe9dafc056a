"""The cluster under faults, with real processes: a worker killed with SIGKILL in the middle of 500
concurrent requests, ``nats-server`` restarted under load (its file store keeps the queue), and a
gateway started while NATS cannot answer JetStream requests yet.

JetStream does the recovering: the killed worker's unacknowledged items are redelivered to the other
worker ``ACK_WAIT_S`` after their last delivery, and the gateway keeps the first result for each
item, so every request is answered once, with the right vector.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import msgpack
import pytest

from sie.queue.streams import ACK_WAIT_S
from tests.conftest import NatsServer, running_nats
from tests.e2e.cluster import Gateway, run_gateway, run_worker, worker_env
from tests.e2e.conftest import MINILM, Server, cosine_of, unpack_body

REQUESTS = 500
HEADERS = {"content-type": "application/msgpack", "accept": "application/msgpack"}


def _texts(count: int, tag: str) -> list[str]:
    return [
        f"{tag} request {i}: the pod was evicted under memory pressure ({i * 7919 % 1000})"
        for i in range(count)
    ]


async def _encode_all(
    url: str, texts: list[str], on_answer: Callable[[httpx.Response], None] | None = None
) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=len(texts), max_keepalive_connections=len(texts))
    async with httpx.AsyncClient(base_url=url, timeout=180, limits=limits) as client:

        async def one(text: str) -> httpx.Response:
            body = msgpack.packb({"items": [{"text": text}]})
            response = await client.post(f"/v1/encode/{MINILM}", content=body, headers=HEADERS)
            if on_answer is not None:
                on_answer(response)
            return response

        return list(await asyncio.gather(*(one(t) for t in texts)))


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[tuple[Gateway, list[Server], NatsServer]]:
    with running_nats(tmp_path) as nats:
        w1 = run_worker(tmp_path / "w1", worker_env(nats.url, "w1"))
        w2 = run_worker(tmp_path / "w2", worker_env(nats.url, "w2"))
        env = {
            "SIE_NATS_URL": nats.url,
            "SIE_HEALTH_PUBLISH_INTERVAL_MS": "500",
            "SIE_GATEWAY_REQUEST_TIMEOUT": "120",
        }
        with w1 as first, w2 as second, run_gateway(tmp_path / "gateway", env) as gateway:
            gateway.wait_for_workers(2, [MINILM])
            yield gateway, [first, second], nats


def test_sigkill_of_a_worker_mid_load_answers_every_request_exactly_once(two_workers) -> None:
    gateway, (victim, survivor), nats = two_workers
    texts = _texts(REQUESTS, "kill")
    answered = by_victim = 0
    killed_at: list[float] = []

    def on_answer(response: httpx.Response) -> None:
        nonlocal answered, by_victim
        answered += 1
        by_victim += response.headers.get("x-sie-worker") == "w1"
        # A tenth answered, the victim among them (on a busy machine w2 may take the first tenth alone).
        if answered >= REQUESTS // 10 and by_victim and not killed_at:
            os.kill(victim.process.pid, signal.SIGKILL)  # no drain, no goodbye: the items it held are lost
            killed_at.append(time.monotonic())

    started = time.monotonic()
    responses = asyncio.run(_encode_all(gateway.url, texts, on_answer))
    finished = time.monotonic()
    assert killed_at, "the load finished before the kill"
    assert victim.process.wait(timeout=10) == -signal.SIGKILL
    assert [r.status_code for r in responses] == [200] * REQUESTS, {
        r.status_code: r.text for r in responses if r.status_code != 200
    }
    expected = survivor.encode(texts)
    for text, response, want in zip(texts, responses, expected, strict=True):
        (item,) = unpack_body(response.content)["items"]
        assert cosine_of(item["dense"]["values"], want) > 1 - 1e-5, text
    # Bounded recovery: the lost items come back one ack wait after their last delivery.
    print(f"500 requests in {finished - started:.1f}s, {finished - killed_at[0]:.1f}s of them after the kill")
    assert finished - killed_at[0] < ACK_WAIT_S + 30, f"{finished - started:.1f}s in all"
    survivors = {r.headers.get("x-sie-worker") for r in responses}
    assert "w2" in survivors and "w1" in survivors  # both served before the kill; w2 took the rest
    _assert_queue_empty(nats.url)


def _assert_queue_empty(url: str) -> None:
    import nats as nats_client

    async def state() -> tuple[int, int, int]:
        client = await nats_client.connect(url)
        try:
            js = client.jetstream()
            stream = await js.stream_info("WORK_POOL_default")
            consumer = await js.consumer_info("WORK_POOL_default", "default_default_default")
            return stream.state.messages, consumer.num_pending, consumer.num_ack_pending
        finally:
            await client.close()

    deadline = time.monotonic() + 10
    while (left := asyncio.run(state())) != (0, 0, 0):
        assert time.monotonic() < deadline, f"work left in the queue: {left}"
        time.sleep(0.2)


def test_a_nats_restart_under_load_loses_and_hangs_nothing(tmp_path: Path) -> None:
    with running_nats(tmp_path) as nats:
        env = {
            "SIE_NATS_URL": nats.url,
            "SIE_HEALTH_PUBLISH_INTERVAL_MS": "500",
            "SIE_GATEWAY_REQUEST_TIMEOUT": "20",
        }
        with (
            run_worker(tmp_path / "w1", worker_env(nats.url, "w1")) as worker,
            run_gateway(tmp_path / "gateway", env) as gateway,
        ):
            gateway.wait_for_workers(1, [MINILM])
            (expected,) = worker.encode(["through a restart"])
            outcomes: list[tuple[float, int, str]] = []
            stop = threading.Event()

            def load() -> None:
                body = msgpack.packb({"items": [{"text": "through a restart"}]})
                with httpx.Client(base_url=gateway.url, timeout=60) as client:
                    while not stop.is_set():
                        response = client.post(f"/v1/encode/{MINILM}", content=body, headers=HEADERS)
                        outcome = (
                            response.headers.get("retry-after", "") if response.status_code == 503 else ""
                        )
                        if response.status_code == 200:
                            (item,) = unpack_body(response.content)["items"]
                            assert cosine_of(item["dense"]["values"], expected) > 1 - 1e-5
                        outcomes.append((time.monotonic(), response.status_code, outcome))

            threads = [threading.Thread(target=load) for _ in range(4)]
            for thread in threads:
                thread.start()
            time.sleep(2)
            restarted = time.monotonic()
            nats.restart()
            time.sleep(1)
            recovered_by = time.monotonic() + 30
            while not any(t > restarted + 1 and code == 200 for t, code, _ in outcomes):
                assert time.monotonic() < recovered_by, "no answer after the restart"
                time.sleep(0.1)
            time.sleep(2)
            stop.set()
            for thread in threads:
                thread.join(timeout=90)
                assert not thread.is_alive(), "a client hung"
            statuses = {code for _, code, _ in outcomes}
            assert statuses <= {200, 503}, outcomes
            assert all(retry for _, code, retry in outcomes if code == 503)  # every 503 says when to retry
            assert sum(code == 200 for t, code, _ in outcomes if t > restarted) > 0
            assert gateway.metric("sie_gateway_nats_connected") == 1
            worker.assert_serving()


def test_a_gateway_started_before_jetstream_answers_is_ready_once_it_does(tmp_path: Path) -> None:
    """Core NATS alone answers JetStream requests with 503 (a cluster electing its leaders times them
    out): the gateway's join retries its bucket and streams instead of dying with the gateway left up
    and never ready. Once NATS restarts with JetStream, the same join finishes."""
    folder = tmp_path / "nats"
    folder.mkdir()
    nats = NatsServer(folder, jetstream=False)
    nats.start()

    def bring_jetstream() -> None:
        time.sleep(3)
        nats.jetstream = True
        nats.restart()

    helper = threading.Thread(target=bring_jetstream)
    try:
        helper.start()
        with run_gateway(tmp_path / "gateway", {"SIE_NATS_URL": nats.url}) as gateway:
            helper.join()
            assert gateway.client.get("/readyz").status_code == 200
            assert "JetStream did not answer" in gateway.log()  # it was asked before it could answer
    finally:
        helper.join()
        nats.stop()
