"""The heap housekeeping around loads and idle devices: what the collector skips, what goes back to the OS."""

from __future__ import annotations

import asyncio
import gc
import os
import platform
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sie.core import heap
from sie.engine.batcher import BatchLimits
from sie.engine.device_thread import DeviceThread
from sie.engine.worker import Clocks, DeviceHousekeeping, ModelWorker, WorkerLimits
from tests.engine.fakes import FakeRunner, FakeTimers, items

GROUP = "group"


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_frozen_objects_are_skipped_until_unloaded():
    node = Node()
    ref = weakref.ref(node)
    heap.freeze_loaded()
    assert gc.get_freeze_count() > 0
    del node
    gc.collect()
    assert ref() is not None, "a full collection walked the frozen generation"
    heap.collect_unloaded()
    assert ref() is None


@pytest.fixture
def full_collections() -> Iterator[list[int]]:
    """The full collections run while the test runs (the automatic ones off, so only asked ones count)."""
    started: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            started.append(1)

    enabled = gc.isenabled()
    gc.disable()
    gc.callbacks.append(note)
    yield started
    gc.callbacks.remove(note)
    if enabled:
        gc.enable()


def test_closing_several_models_collects_once_at_the_end(full_collections: list[int]):
    nodes = [Node() for _ in range(3)]
    refs = [weakref.ref(node) for node in nodes]
    heap.freeze_loaded()
    full_collections.clear()
    del nodes
    with heap.one_collection():
        for _ in refs:
            heap.collect_unloaded()  # each model's close
        assert full_collections == [] and all(ref() is not None for ref in refs)
    assert len(full_collections) == 1 and all(ref() is None for ref in refs)
    heap.collect_unloaded()  # outside: at once, as a single unload does
    assert len(full_collections) == 2
    with heap.one_collection():
        pass  # nothing closed: nothing to collect
    assert len(full_collections) == 2


def test_the_deferral_is_the_closing_threads_alone(full_collections: list[int]):
    """Models close on the device thread; another thread unloading meanwhile collects at once."""
    with heap.one_collection(), ThreadPoolExecutor(1) as other:
        other.submit(heap.collect_unloaded).result()
        assert len(full_collections) == 1
    assert len(full_collections) == 1


def _rss_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_return_free_memory_gives_freed_heap_pages_back():
    blocks = [bytearray(65536) for _ in range(3200)]  # 200 MiB of blocks below malloc's mmap threshold
    kept = blocks[1::2]  # every other block stays, so freeing the rest cannot shrink the heap's top
    del blocks
    before = _rss_bytes()
    assert heap.return_free_memory()
    assert before - _rss_bytes() > 50 * 2**20
    assert len(kept) == 1600


def test_periodic_trim_trims_at_most_once_per_interval():
    now = [100.0]
    trims: list[float] = []
    trim = heap.PeriodicTrim(10.0, trim=lambda: bool(trims.append(now[0])), clock=lambda: now[0])
    fired, due = [], []
    for step in (0.0, 4.0, 9.9, 10.1, 15.0, 25.0, 25.5):
        now[0] = 100.0 + step
        due.append(trim.due())
        fired.append(trim())
    assert fired == [False, False, False, True, False, True, False]
    assert due == fired  # what the loop reads before queueing the call is what the call does
    assert trims == [110.1, 125.0]


def _worker(
    executor: DeviceThread,
    on_idle: Callable[[], object],
    timers: FakeTimers,
    after_batch: Callable[[], object] | None = None,
    after_batch_due: Callable[[], bool] = lambda: True,
) -> ModelWorker:
    """A worker on the fake runner (no model): its idle timer fires when the test says so."""
    limits = BatchLimits(max_tokens=64, max_items=4, max_wait_s=0.0)
    worker = ModelWorker(
        "t",
        FakeRunner(),
        WorkerLimits(limits, 64),
        executor,
        DeviceHousekeeping(
            on_idle=on_idle, after_batch=after_batch, after_batch_due=after_batch_due, idle_after_s=1.0
        ),
        clocks=Clocks(call_later=timers),
    )
    worker.start()
    return worker


async def _device_done(executor: DeviceThread) -> None:
    """Everything queued on the single device thread so far has run (it is FIFO), and the loop has
    taken the callbacks of what finished."""
    await executor.run(asyncio.get_running_loop(), lambda: None)
    await asyncio.sleep(0)


async def test_worker_runs_idle_housekeeping_only_once_the_device_is_idle():
    calls: list[int] = []
    timers = FakeTimers()
    with DeviceThread() as executor:
        worker = _worker(executor, lambda: calls.append(worker.pending_items), timers)
        for _ in range(3):  # back to back: each batch cancels the idle timer the last one left
            await asyncio.gather(*worker.submit(items(3, 3, 3, 3, 3), GROUP))
        assert len(timers.scheduled) >= 3 and len(timers.pending()) == 1
        assert all(t.delay == 1.0 for t in timers.scheduled)
        assert calls == []
        timers.fire_pending()  # a second without work
        await _device_done(executor)
        assert calls == [0]
        await worker.close()


async def test_a_failing_idle_hook_is_logged_and_the_worker_keeps_serving(caplog):
    timers = FakeTimers()

    def broken() -> None:
        raise OSError("no trim today")

    with DeviceThread() as executor:
        worker = _worker(executor, broken, timers)
        await asyncio.gather(*worker.submit(items(3), GROUP))
        timers.fire_pending()
        await _device_done(executor)
        failures = [r for r in caplog.records if r.levelname == "WARNING" and "OSError" in r.getMessage()]
        assert len(failures) == 1 and "idle" in failures[0].getMessage()
        (result,) = await asyncio.gather(*worker.submit(items(5), GROUP))
        assert result.outputs.score == 5.0
        await worker.close()


async def test_after_batch_runs_on_the_device_thread_after_each_batch_and_its_failure_is_logged(caplog):
    threads: list[str] = []

    def after_batch() -> None:
        threads.append(threading.current_thread().name)
        raise OSError("trim failed")

    with DeviceThread("device") as executor:
        worker = _worker(executor, lambda: None, FakeTimers(), after_batch=after_batch)
        for _ in range(2):  # 10 items, at most 4 per batch: three batches per request
            results = await asyncio.gather(*worker.submit(items(*[3] * 10), GROUP))
            assert [r.outputs.score for r in results] == [3.0] * 10
        await _device_done(executor)
        assert len(threads) == 6 and all(name.startswith("device") for name in threads)
        failures = [r for r in caplog.records if "after-batch" in r.getMessage()]
        assert len(failures) == 6 and all("OSError('trim failed')" in r.getMessage() for r in failures)
        await worker.close()


async def test_after_batch_not_due_is_not_sent_to_the_device_thread():
    """Every batch asks whether the trim is due; only the due ones reach the device thread."""
    ran: list[int] = []
    asked = iter([False, True, False])

    with DeviceThread("device") as executor:
        worker = _worker(
            executor,
            lambda: None,
            FakeTimers(),
            after_batch=lambda: ran.append(1),
            after_batch_due=lambda: next(asked),
        )
        results = await asyncio.gather(*worker.submit(items(*[3] * 10), GROUP))  # three batches
        assert len(results) == 10
        await _device_done(executor)
        assert ran == [1]
        assert next(asked, None) is None  # asked once per batch
        await worker.close()


_TCMALLOC_PROBE = """
import sys
from pathlib import Path
from sie.core import heap

def rss():
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096

blocks = [bytearray(65536) for _ in range(3200)]
kept = blocks[1::2]
del blocks
before = rss()
assert heap.return_free_memory()
print(before - rss())
"""


def test_return_free_memory_releases_tcmallocs_page_heap_when_the_process_runs_on_it():
    from sie.core import allocator

    library = allocator.find(allocator.TCMALLOC)
    if library is None:
        pytest.skip("libtcmalloc-minimal4 is not installed (scripts/setup installs it)")
    env = {**os.environ, "LD_PRELOAD": library, "PYTHONPATH": str(Path(heap.__file__).parents[2])}
    done = subprocess.run([sys.executable, "-c", _TCMALLOC_PROBE], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 50 * 2**20
