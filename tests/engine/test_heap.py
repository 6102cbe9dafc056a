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
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path

import pytest

from sie.core import heap
from sie.engine.batcher import BatchLimits
from sie.engine.loader import LoadedModel
from sie.engine.runner import ModelRunner
from sie.engine.worker import ModelWorker
from tests.engine.test_engine import DENSE_GROUP, INT8, make_engine


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
    fired = []
    for step in (0.0, 4.0, 9.9, 10.1, 15.0, 25.0, 25.5):
        now[0] = 100.0 + step
        fired.append(trim())
    assert fired == [False, False, False, True, False, True, False]
    assert trims == [110.1, 125.0]


def _worker(
    model: LoadedModel,
    executor: Executor,
    on_idle: Callable[[], object],
    idle_after_s: float,
    after_batch: Callable[[], object] | None = None,
) -> ModelWorker:
    limits = BatchLimits(max_tokens=64, max_items=4, max_wait_s=0.0)
    worker = ModelWorker(
        "t",
        ModelRunner(model.adapter, limits.max_tokens),
        limits,
        executor,
        64,
        on_idle=on_idle,
        idle_after_s=idle_after_s,
        after_batch=after_batch,
    )
    worker.start()
    return worker


async def test_worker_runs_idle_housekeeping_only_once_the_device_is_idle(tmp_path):
    engine = make_engine(tmp_path)
    await engine.preload([INT8])
    model, _ = engine.registry.ready(INT8)
    calls: list[int] = []
    executor = ThreadPoolExecutor(1)
    worker = _worker(model, executor, lambda: calls.append(worker.pending_items), idle_after_s=0.2)
    for _ in range(3):  # back-to-back requests, 0.05 s apart: the device never idles for 0.2 s
        await asyncio.gather(
            *worker.submit(model.adapter.prepare(["a b c"] * 10, DENSE_GROUP.forward), DENSE_GROUP)
        )
        await asyncio.sleep(0.05)
    assert calls == []
    await asyncio.sleep(0.5)
    assert calls == [0]
    await worker.close()
    executor.shutdown()
    await engine.close()


async def test_a_failing_idle_hook_is_logged_and_the_worker_keeps_serving(tmp_path, caplog):
    engine = make_engine(tmp_path)
    await engine.preload([INT8])
    model, _ = engine.registry.ready(INT8)
    executor = ThreadPoolExecutor(1)

    def broken() -> None:
        raise OSError("no trim today")

    worker = _worker(model, executor, broken, idle_after_s=0.05)
    await asyncio.gather(*worker.submit(model.adapter.prepare(["a b c"], DENSE_GROUP.forward), DENSE_GROUP))
    await asyncio.sleep(0.3)
    assert "idle housekeeping for model t failed: OSError('no trim today')" in caplog.text
    results = await asyncio.gather(
        *worker.submit(model.adapter.prepare(["d e f"], DENSE_GROUP.forward), DENSE_GROUP)
    )
    assert results[0].outputs.dense.shape == (384,)
    await worker.close()
    executor.shutdown()
    await engine.close()


async def test_after_batch_runs_on_the_device_thread_after_each_batch_and_its_failure_is_logged(
    tmp_path, caplog
):
    engine = make_engine(tmp_path)
    await engine.preload([INT8])
    model, _ = engine.registry.ready(INT8)
    executor = ThreadPoolExecutor(1, thread_name_prefix="device")
    threads: list[str] = []

    def after_batch() -> None:
        threads.append(threading.current_thread().name)
        raise OSError("trim failed")

    worker = _worker(model, executor, lambda: None, idle_after_s=60.0, after_batch=after_batch)
    for _ in range(2):  # 10 items, at most 4 per batch: three batches per request, the device busy
        results = await asyncio.gather(
            *worker.submit(model.adapter.prepare(["a b c"] * 10, DENSE_GROUP.forward), DENSE_GROUP)
        )
        assert [r.outputs.dense.shape for r in results] == [(384,)] * 10
    await asyncio.sleep(0.1)
    assert len(threads) == 6 and all(name.startswith("device") for name in threads)
    assert "after-batch housekeeping for model t failed: OSError('trim failed')" in caplog.text
    await worker.close()
    executor.shutdown()
    await engine.close()


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
