"""The device's one thread (``engine.device_thread``): calls queued by ``run`` (answered on the event
loop) and by ``submit`` (a concurrent future) run one at a time in the order queued, errors reach the
caller, a call whose caller went away is skipped, and shutdown cancels what waits."""

from __future__ import annotations

import asyncio
import threading

import pytest

from sie.engine.device_thread import DeviceThread


def test_run_and_submit_share_one_thread_in_order() -> None:
    device = DeviceThread("test-device")
    order: list[str] = []
    threads: set[str] = set()

    def note(name: str) -> str:
        order.append(name)
        threads.add(threading.current_thread().name)
        return name.upper()

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        first = device.run(loop, note, "a")
        second = device.submit(note, "b")
        third = device.run(loop, note, name="c")
        return [await first, await asyncio.wrap_future(second), await third]

    try:
        assert asyncio.run(main()) == ["A", "B", "C"]
        assert order == ["a", "b", "c"] and threads == {"test-device"}
    finally:
        device.shutdown()


def test_errors_reach_the_caller_and_a_stop_iteration_is_a_runtime_error() -> None:
    device = DeviceThread()

    def fail(error: BaseException) -> None:
        raise error

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with pytest.raises(ValueError, match="bad batch"):
            await device.run(loop, fail, ValueError("bad batch"))
        with pytest.raises(RuntimeError, match="StopIteration"):
            await device.run(loop, fail, StopIteration())
        assert await device.run(loop, sum, [1, 2]) == 3  # the thread serves on

    try:
        asyncio.run(main())
        with pytest.raises(KeyError):
            device.submit(fail, KeyError("k")).result(timeout=10)
    finally:
        device.shutdown()


def test_a_call_cancelled_while_it_waits_never_runs_and_shutdown_cancels_the_queue() -> None:
    device = DeviceThread()
    started, gate = threading.Event(), threading.Event()
    ran: list[str] = []

    def hold() -> bool:
        started.set()
        return gate.wait(10)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        blocking = device.run(loop, hold)
        assert await asyncio.to_thread(started.wait, 10)  # the thread is busy with it: the rest queue
        abandoned = device.run(loop, ran.append, "abandoned")
        abandoned.cancel()
        queued = device.run(loop, ran.append, "queued")
        left = device.submit(ran.append, "left")
        stopping = asyncio.create_task(asyncio.to_thread(device.shutdown, True, cancel_futures=True))
        while not left.cancelled():  # shutdown drained the queue while the thread was still busy
            await asyncio.sleep(0.01)
        gate.set()
        assert await blocking is True
        await stopping
        with pytest.raises(asyncio.CancelledError):
            await queued
        assert left.cancelled()

    asyncio.run(main())
    assert ran == []
    with pytest.raises(RuntimeError, match="after shutdown"):
        device.submit(ran.append, "late")
