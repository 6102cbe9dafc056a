"""A slow worker beside a fast one (issue 38), with real processes: two MiniLM workers on one lane,
one held to a few percent of a core in its own cgroup (``chaos.starve``), a steady load of 1- and
32-item encode requests through the gateway.

Workers share the lane's durable consumer, and an item a worker pulled waits for that worker. With a
fixed allowance the starved worker pulled as much as the fast one (a pull's 64 items, up to 256 in
flight) and sat on them: requests split over both waited for its part, and some passed the gateway's
timeout while the fast worker idled. Each worker now holds what it finishes in ``SIE_NATS_HOLD_S``
(2 s) at its own pace (``sie.worker.pace``), so once it has measured itself the starved worker holds a
few items (``MIN_HELD``, 16) and the fast one takes the rest; before it knows its pace it holds
``MIN_HELD`` too (it once held a pull's worth then, and a request waited past 120 s for it). The
queue is watched from NATS (``chaos.queue_watch``): every delivery, ack and result, so "answered
once", "delivered once" and "held at once" are counted outside the processes. Latencies are
printed, never asserted (timings: ``bench``).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgpack
import numpy as np
import pytest

from bench.procs import cpu_seconds
from chaos import starve
from chaos.queue_watch import QueueWatch, Summary
from tests.conftest import NatsServer, running_nats
from tests.e2e.cluster import Gateway, run_gateway, run_worker, worker_env
from tests.e2e.conftest import MINILM, MSGPACK_HEADERS, Server, cosine_of, unpack_body
from tests.e2e.test_cluster_faults import _assert_queue_empty

STARVED_PER_S = 5  # MiniLM items a second the starved worker is left (its share follows the machine)
CONCURRENCY = 8
LEARN = 24  # requests while the starved worker measures its pace (until then it holds MIN_HELD)
MEASURE = 64  # requests after
# Held at once by the starved worker once it knows its pace: 2 s of its pace, or MIN_HELD (16); a
# fixed allowance held a pull's worth (52 to 115 in runs on a 2-core machine).
MOST_HELD = 32
TEXTS = [f"request {i}: the node was cordoned while its pods drained ({i * 7919 % 1000})" for i in range(64)]


def _bodies() -> list[list[str]]:
    """Requests in turn: three of one item, one of 32."""
    return [[TEXTS[i % 64]] if i % 4 else [TEXTS[(i + j) % 64] for j in range(32)] for i in range(16)]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Gateway, Server, Server, NatsServer]]:
    why = starve.available()
    if why is not None:
        pytest.skip(why)
    with running_nats(tmp_path) as nats:
        env = {
            "SIE_NATS_URL": nats.url,
            "SIE_HEALTH_PUBLISH_INTERVAL_MS": "500",
            # A request waits for its part on the starved worker: what it held before it knew its
            # pace (one pull's worth) may take longer than the default 30 s there.
            "SIE_GATEWAY_REQUEST_TIMEOUT": "120",
        }
        with (
            run_worker(tmp_path / "fast", worker_env(nats.url, "fast", SIE_DEVICE="cpu")) as fast,
            run_worker(tmp_path / "slow", worker_env(nats.url, "slow", SIE_DEVICE="cpu")) as slow,
            run_gateway(tmp_path / "gateway", env) as gateway,
        ):
            gateway.wait_for_workers(2, [MINILM])
            yield gateway, fast, slow, nats


async def _load(url: str, nats_url: str, count: int) -> tuple[list[tuple[int, httpx.Response]], Summary]:
    """``count`` requests, ``CONCURRENCY`` at a time, watched from NATS; each with its body's index."""
    watch = QueueWatch(nats_url)
    await watch.start()
    bodies = _bodies()
    pending = iter(range(count))
    answers: list[tuple[int, httpx.Response]] = []
    latencies: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:

        async def sender() -> None:
            for i in pending:
                body = msgpack.packb({"items": [{"text": t} for t in bodies[i % len(bodies)]]})
                started = time.monotonic()
                response = await client.post(f"/v1/encode/{MINILM}", content=body, headers=MSGPACK_HEADERS)
                latencies.append(time.monotonic() - started)
                answers.append((i % len(bodies), response))

        await asyncio.gather(*(sender() for _ in range(CONCURRENCY)))
    await asyncio.sleep(0.5)  # the last acks
    await watch.stop()
    cut = statistics.quantiles(latencies, n=100)
    print(f"{count} requests: p50 {cut[49]:.2f} s, p99 {cut[98]:.2f} s")
    return answers, watch.summary()


def test_a_starved_worker_holds_little_and_the_fast_one_answers_the_rest(
    cluster: tuple[Gateway, Server, Server, NatsServer],
) -> None:
    gateway, fast, slow, nats = cluster
    took = []  # CPU seconds of the worker's whole process (every thread), not wall time
    for _ in range(3):
        before = cpu_seconds(fast.process.pid)
        vectors = fast.encode(TEXTS)
        took.append(cpu_seconds(fast.process.pid) - before)
    expected = dict(zip(TEXTS, vectors, strict=True))
    # The share of a core that leaves about STARVED_PER_S items a second on this machine; at least
    # 3 %: below it the worker's own upkeep (its pulls, health, in-progress marks) eats the quota
    # and an item it holds may wait for minutes (at 1 % a request passed the 120 s timeout in CI).
    share = min(0.10, max(0.03, STARVED_PER_S * min(took) / len(TEXTS)))
    print(
        f"a worker encodes an item in {min(took) / len(TEXTS) * 1e3:.1f} ms of CPU here;"
        f" the slow one gets {share:.1%} of a core"
    )
    with starve.starved(slow.process.pid, share) as group:
        learned, learning = asyncio.run(_load(gateway.url, nats.url, LEARN))
        measured, summary = asyncio.run(_load(gateway.url, nats.url, MEASURE))
        assert group.throttling().throttled_periods > 0  # it really was held back
    print(learning, summary, sep="\n")
    bodies = _bodies()
    for index, response in learned + measured:
        assert response.status_code == 200, response.text
        items = unpack_body(response.content)["items"]
        vectors = [np.asarray(item["dense"]["values"]) for item in items]
        assert len(vectors) == len(bodies[index])
        for text, vector in zip(bodies[index], vectors, strict=True):
            assert cosine_of(vector, expected[text]) > 1 - 1e-5, text
    # Once, each: no item answered twice, none delivered twice (its in-progress marks kept flowing).
    assert summary.twice_answered == [] and summary.max_delivered == 1 and summary.redelivered == 0
    assert gateway.metric("sie_gateway_queue_inbox_skips_total", reason="duplicate") == 0
    items = sum(len(bodies[i]) for i, _ in measured)
    assert sum(summary.answers_per_worker.values()) == items == summary.items
    # The fast worker answers most; the starved one held a few items at a time, not a pull's worth.
    assert summary.share("fast") >= 0.8, summary.answers_per_worker
    assert 0 < summary.max_held.get("slow", 0) <= MOST_HELD, summary.max_held
    assert learning.max_held.get("slow", 0) <= MOST_HELD, learning.max_held  # from its first pull
    assert summary.max_held["fast"] > MOST_HELD  # the fast one took whole requests at once
    _assert_queue_empty(nats.url)
    slow.assert_serving()
