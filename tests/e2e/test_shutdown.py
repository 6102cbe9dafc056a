"""SIGTERM on a real ``sie-server`` process with 50 requests in flight.

What a rolling deploy needs: every request the server had taken is answered (200, with its vectors),
``/readyz`` turns 503 while the listener is still open (so the load balancer sees it and stops routing),
requests that arrive during the drain get 503 ``MODEL_NOT_LOADED`` with ``Retry-After`` (the client
retries elsewhere), and the process then exits 0 well inside the drain limit.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import msgpack

from tests.e2e.conftest import DIMS, ENCODE, MSGPACK_HEADERS, Server, run_server, unpack_body

REQUESTS = 50
ITEMS = 1
DRAIN_MIN_S = 1.5  # the drain lasts at least this long, so the test can probe it
EXIT_WITHIN_S = 25.0
TEXT = "Graceful shutdown keeps every request that was accepted and turns the readiness probe off first. "


async def _in_flight(client: httpx.AsyncClient) -> int:
    found = re.search(r"^sie_requests_in_flight (\S+)$", (await client.get("/metrics")).text, re.M)
    assert found, "sie_requests_in_flight is missing from /metrics"
    return int(float(found.group(1)))


async def _poll_readyz(url: str, stop: asyncio.Event, seen: list[tuple[float, str]]) -> None:
    """``/readyz`` every 20 ms on a fresh connection each time: "200", "503" or "closed"."""
    while not stop.is_set():
        try:
            async with httpx.AsyncClient(base_url=url, timeout=2.0) as probe:
                status = str((await probe.get("/readyz")).status_code)
        except httpx.TransportError:
            status = "closed"
        seen.append((time.monotonic(), status))
        if status == "closed":
            return
        await asyncio.sleep(0.02)


async def _encode(client: httpx.AsyncClient, index: int) -> tuple[int, Any, float]:
    items = [{"text": f"{TEXT} request {index} item {i}"} for i in range(ITEMS)]
    response = await client.post(ENCODE, content=msgpack.packb({"items": items}), headers=MSGPACK_HEADERS)
    body = unpack_body(response.content) if response.status_code == 200 else response.text
    return response.status_code, body, time.monotonic()


async def _scenario(server: Server) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=REQUESTS + 10)
    async with httpx.AsyncClient(base_url=server.url, timeout=60.0, limits=limits) as client:
        status, _, _ = await _encode(client, -1)
        assert status == 200
        work = [asyncio.create_task(_encode(client, i)) for i in range(REQUESTS)]
        async with httpx.AsyncClient(base_url=server.url, timeout=5.0) as watcher:
            deadline = time.monotonic() + 30
            while True:  # until the server has taken all 50 (in flight now, or already answered)
                in_flight = await _in_flight(watcher)
                if in_flight + sum(task.done() for task in work) >= REQUESTS or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.01)
        answered_before = sum(task.done() for task in work)
        signalled = time.monotonic()
        os.kill(server.process.pid, signal.SIGTERM)
        stop = asyncio.Event()
        readyz: list[tuple[float, str]] = []
        poller = asyncio.create_task(_poll_readyz(server.url, stop, readyz))
        await asyncio.sleep(0.1)
        async with httpx.AsyncClient(base_url=server.url, timeout=5.0) as late:
            refused = [
                await late.post(
                    ENCODE, content=msgpack.packb({"items": [{"text": "too late"}]}), headers=MSGPACK_HEADERS
                )
                for _ in range(3)
            ]
            openai = await late.post(
                "/v1/embeddings", json={"model": "sentence-transformers/all-MiniLM-L6-v2", "input": "x"}
            )
        results = await asyncio.gather(*work)
        exit_code = await asyncio.to_thread(server.process.wait, EXIT_WITHIN_S)
        exited = time.monotonic()
        stop.set()
        await poller
    return {
        "in_flight_at_signal": in_flight,
        "answered_before": answered_before,
        "signalled": signalled,
        "readyz": readyz,
        "refused": refused,
        "openai": openai,
        "results": results,
        "exit_code": exit_code,
        "exited": exited,
    }


def test_sigterm_answers_every_request_in_flight_and_readyz_fails_first(tmp_path: Path) -> None:
    env = {
        "SIE_MAX_BATCH_REQUESTS": "1",  # one request per forward: the 50 take a while to run
        "SIE_INTRA_OP_THREADS": "1",
        "SIE_DEFAULT_COMPUTE_PRECISION": "float32",
        "SIE_DRAIN_MIN_S": str(DRAIN_MIN_S),
    }
    with run_server(tmp_path, env) as server:
        run = asyncio.run(_scenario(server))
        log = server.log()

    # Every one of the 50 was answered in full.
    statuses = [status for status, _, _ in run["results"]]
    assert statuses == [200] * REQUESTS, statuses
    for _, body, _ in run["results"]:
        assert len(body["items"]) == ITEMS
        assert all(item["dense"]["values"].shape == (DIMS,) for item in body["items"])
    assert run["answered_before"] < REQUESTS, "every request finished before SIGTERM: the load is too light"
    finished_after = [done for _, _, done in run["results"] if done > run["signalled"]]
    assert finished_after, "no request was still in flight when SIGTERM arrived"

    # /readyz: 503 from the signal on, while the listener still answered, and only then closed.
    after = [(t, status) for t, status in run["readyz"]]
    statuses_seen = [status for _, status in after]
    assert "200" not in statuses_seen, statuses_seen
    assert statuses_seen[-1] == "closed", statuses_seen
    first_503 = next(t for t, status in after if status == "503")
    closed = next(t for t, status in after if status == "closed")
    assert first_503 < closed
    assert first_503 - run["signalled"] < 0.5
    assert closed - run["signalled"] >= DRAIN_MIN_S

    # Requests arriving during the drain: 503 with Retry-After, in the native and the OpenAI envelope.
    for response in run["refused"]:
        assert response.status_code == 503
        assert response.headers["retry-after"] == "5"
        assert response.json()["detail"]["code"] == "MODEL_NOT_LOADED"
    assert run["openai"].status_code == 503
    assert run["openai"].headers["retry-after"]
    assert run["openai"].json()["error"]["code"] == "model_not_available"

    # A clean exit, long before the drain limit; the models were unloaded on the way out.
    assert run["exit_code"] == 0, log[-3000:]
    assert run["exited"] - run["signalled"] < EXIT_WITHIN_S
    assert "drained in" in log
    assert "Application shutdown complete" in log


async def _overdue_scenario(server: Server) -> list[tuple[int, Any, dict[str, str]]]:
    limits = httpx.Limits(max_connections=REQUESTS + 10)
    async with httpx.AsyncClient(base_url=server.url, timeout=60.0, limits=limits) as client:

        async def slow(index: int) -> tuple[int, Any, dict[str, str]]:
            items = [{"text": f"{TEXT * 3} request {index} item {i}"} for i in range(8)]
            try:
                response = await client.post(
                    ENCODE, json={"items": items}, headers={"accept": "application/json"}
                )
            except httpx.TransportError as exc:
                return 0, repr(exc), {}
            return response.status_code, response.json(), dict(response.headers)

        work = [asyncio.create_task(slow(i)) for i in range(REQUESTS)]
        async with httpx.AsyncClient(base_url=server.url, timeout=5.0) as watcher:
            deadline = time.monotonic() + 30
            while await _in_flight(watcher) < REQUESTS and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        os.kill(server.process.pid, signal.SIGTERM)
        results = await asyncio.gather(*work)
        assert await asyncio.to_thread(server.process.wait, EXIT_WITHIN_S) == 0
    return results


def test_requests_still_running_at_the_drain_limit_get_503_not_a_cut_connection(tmp_path: Path) -> None:
    """400 one-item forwards cannot finish in the 0.5 s drain: what is left is refused with the
    shutdown 503 (the client retries elsewhere), never a 500 or a reset connection."""
    env = {"SIE_MAX_BATCH_REQUESTS": "1", "SIE_DRAIN_TIMEOUT_S": "0.5"}
    with run_server(tmp_path, env) as server:
        results = asyncio.run(_overdue_scenario(server))
    statuses = sorted({status for status, _, _ in results})
    assert set(statuses) <= {200, 503}, results
    refused = [(body, headers) for status, body, headers in results if status == 503]
    assert refused, "every request finished inside the 0.5 s drain: the load is too light"
    for body, headers in refused:
        assert body["detail"]["code"] == "MODEL_NOT_LOADED"
        assert headers["retry-after"] == "5"
