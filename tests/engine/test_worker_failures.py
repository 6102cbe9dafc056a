"""The worker's failure semantics on a fake batch runner: no torch, no model, no sleeps on the wall
clock. Every item is answered exactly once, whatever breaks."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from sie.adapters.batch import ItemOutputs, Prepared
from sie.engine.batcher import BatchLimits
from sie.engine.device_thread import DeviceThread
from sie.engine.errors import EngineClosed, InferenceFailed, OutOfMemory, ResourceExhausted
from sie.engine.oom import OomAction, OomRecovery
from sie.engine.worker import BatchStats, DeviceHousekeeping, ModelWorker, WorkerLimits
from tests.engine.fakes import FakeRunner, items

LIMITS = BatchLimits(max_tokens=1000, max_items=4, max_wait_s=0.0)
GROUP = "group"


@pytest.fixture
async def executor() -> AsyncIterator[DeviceThread]:
    pool = DeviceThread()
    yield pool
    pool.shutdown(wait=True)


def worker(runner: FakeRunner, executor: DeviceThread, **kwargs: Any) -> ModelWorker:
    built = ModelWorker("m", runner, WorkerLimits(LIMITS, 64), executor, **kwargs)
    built.start()
    return built


async def test_a_failing_forward_fails_its_batch_only(executor):
    runner = FakeRunner(RuntimeError("boom"))
    w = worker(runner, executor)
    first = w.submit(items(3, 4), GROUP)
    results = await asyncio.gather(*first, return_exceptions=True)
    assert all(isinstance(r, InferenceFailed) and isinstance(r.__cause__, RuntimeError) for r in results)
    second = await asyncio.gather(*w.submit(items(5), GROUP))
    assert [r.outputs.score for r in second] == [5.0]
    assert w.pending_items == 0
    await w.close()


async def test_a_stop_iteration_from_the_forward_fails_its_batch_instead_of_hanging(executor):
    """asyncio cannot set StopIteration on a future: a library's bare ``next`` escaping an adapter
    would leave the request waiting forever. It fails the batch like any other error."""
    w = worker(FakeRunner(StopIteration()), executor)
    results = await asyncio.wait_for(asyncio.gather(*w.submit(items(3), GROUP), return_exceptions=True), 5)
    assert len(results) == 1 and isinstance(results[0], InferenceFailed)
    assert isinstance(results[0].__cause__, RuntimeError)
    assert [r.outputs.score for r in await asyncio.gather(*w.submit(items(4), GROUP))] == [4.0]
    await w.close()


async def test_out_of_memory_evicts_then_retries_then_splits(executor):
    evictions: list[bool] = []

    async def on_oom() -> bool:
        evictions.append(True)
        return len(evictions) == 1  # one model could be evicted, the second time none

    no_cache_clear = OomRecovery(strategy=(OomAction.EVICT_LRU, OomAction.SPLIT_BATCH))
    runner = FakeRunner(OutOfMemory("x"))  # the first run fails; the retry after the eviction works
    runner.split = runner
    w = worker(runner, executor, housekeeping=DeviceHousekeeping(on_oom=on_oom, oom=no_cache_clear))
    assert [r.outputs.score for r in await asyncio.gather(*w.submit(items(2, 3), GROUP))] == [2.0, 3.0]
    assert evictions == [True] and len(runner.batches) == 2 and runner.freed == 0

    split = runner.split = FakeRunner()
    runner.fail = [OutOfMemory("x")]
    w2 = worker(runner, executor, housekeeping=DeviceHousekeeping(on_oom=on_oom, oom=no_cache_clear))
    assert [r.outputs.score for r in await asyncio.gather(*w2.submit(items(2, 3), GROUP))] == [2.0, 3.0]
    assert split.batches == [[2, 3]]  # nothing left to evict: the batch ran split

    runner.fail, runner.split = [OutOfMemory("x")], None
    split_only = DeviceHousekeeping(oom=OomRecovery(strategy=(OomAction.SPLIT_BATCH,)))
    w3 = worker(runner, executor, housekeeping=split_only)  # no split fits: come back later
    (outcome,) = await asyncio.gather(*w3.submit(items(2), GROUP), return_exceptions=True)
    assert isinstance(outcome, ResourceExhausted) and outcome.retry_after_s == 5
    for one in (w, w2, w3):
        await one.close()


async def test_the_default_plan_frees_caches_then_evicts_then_splits_in_that_order(executor):
    """SIE_OOM_RECOVERY__STRATEGY's default: each step is tried once, in order, until the batch runs."""
    evictions: list[bool] = []

    async def on_oom() -> bool:
        evictions.append(True)
        return True

    runner = FakeRunner(OutOfMemory("x"), OutOfMemory("x"), OutOfMemory("x"), split=FakeRunner())
    w = worker(runner, executor, housekeeping=DeviceHousekeeping(on_oom=on_oom))
    assert [r.outputs.score for r in await asyncio.gather(*w.submit(items(2, 3), GROUP))] == [2.0, 3.0]
    # run, free caches and run, evict and run, then split at the default depth
    assert (len(runner.batches), runner.freed, evictions, runner.split_depths) == (3, 1, [True], [4])
    await w.close()


async def test_recovery_off_or_exhausted_is_resource_exhausted_with_the_configured_retry_after(executor):
    """SIE_OOM_RECOVERY__ENABLED=false fails the batch at the first out of memory, without freeing or
    evicting; a plan that runs out of steps fails it too; both say SIE_OOM_RECOVERY__RETRY_AFTER_S."""
    evictions: list[bool] = []

    async def on_oom() -> bool:
        evictions.append(True)
        return True

    off = OomRecovery(enabled=False, retry_after_s=9)
    runner = FakeRunner(OutOfMemory("x"), split=FakeRunner())
    w = worker(runner, executor, housekeeping=DeviceHousekeeping(on_oom=on_oom, oom=off))
    (outcome,) = await asyncio.gather(*w.submit(items(2), GROUP), return_exceptions=True)
    assert isinstance(outcome, ResourceExhausted) and outcome.retry_after_s == 9
    assert "recovery off" in str(outcome)
    assert (len(runner.batches), runner.freed, evictions, runner.split_depths) == (1, 0, [], [])

    cache_only = OomRecovery(strategy=(OomAction.CACHE_CLEAR,), retry_after_s=7)
    runner2 = FakeRunner(OutOfMemory("x"), OutOfMemory("x"), split=FakeRunner())
    w2 = worker(runner2, executor, housekeeping=DeviceHousekeeping(on_oom=on_oom, oom=cache_only))
    outcomes = await asyncio.gather(*w2.submit(items(2, 3), GROUP), return_exceptions=True)
    assert all(isinstance(o, ResourceExhausted) and o.retry_after_s == 7 for o in outcomes)
    assert (len(runner2.batches), runner2.freed, evictions, runner2.split_depths) == (2, 1, [], [])
    for one in (w, w2):
        await one.close()


async def test_an_eviction_slower_than_its_timeout_moves_on_to_the_next_step(executor):
    """SIE_OOM_RECOVERY__EVICTION_LOCK_TIMEOUT_S: the batch does not wait out a slow eviction."""
    release = asyncio.Event()

    async def slow_eviction() -> bool:
        await release.wait()
        return True

    plan = OomRecovery(
        strategy=(OomAction.EVICT_LRU, OomAction.SPLIT_BATCH), max_split_depth=2, eviction_lock_timeout_s=0.1
    )
    runner = FakeRunner(OutOfMemory("x"), split=FakeRunner())
    w = worker(runner, executor, housekeeping=DeviceHousekeeping(on_oom=slow_eviction, oom=plan))
    assert [r.outputs.score for r in await asyncio.gather(*w.submit(items(2, 3), GROUP))] == [2.0, 3.0]
    assert len(runner.batches) == 1 and runner.split_depths == [2]  # split without a second run
    release.set()
    await w.close()


class Fatal(BaseException):
    """Not an ``Exception``: it ends the run loop itself, as a bug in the loop would."""


class Blocking(FakeRunner):
    """Holds the device thread until ``release`` is set, then answers, or raises ``then``."""

    def __init__(self, then: BaseException | None = None) -> None:
        super().__init__()
        self.loop = asyncio.get_running_loop()
        self.started = asyncio.Event()
        self.release = threading.Event()  # waited on by the device thread, whatever the loop does
        self.then = then

    def run(self, batch: list[Prepared], groups: Sequence[Any]) -> tuple[list[ItemOutputs], float, float]:
        self.loop.call_soon_threadsafe(self.started.set)
        self.release.wait(timeout=10)
        if self.then is not None:
            raise self.then
        return super().run(batch, groups)


async def test_a_dead_loop_fails_its_batch_and_what_is_queued_and_refuses_new_work(executor):
    runner = Blocking(then=Fatal())
    w = worker(runner, executor)
    running = w.submit(items(1), GROUP)
    await runner.started.wait()
    queued = w.submit(items(2), GROUP)
    runner.release.set()
    outcomes = await asyncio.gather(*running, *queued, return_exceptions=True)
    assert all(isinstance(o, InferenceFailed) and "worker stopped" in str(o) for o in outcomes), outcomes
    with pytest.raises(InferenceFailed, match="worker stopped"):
        w.submit(items(1), GROUP)
    await w.close()


async def test_close_fails_the_running_batch_and_queued_work_with_engine_closed(executor):
    runner = Blocking()
    w = worker(runner, executor)
    running = w.submit(items(1), GROUP)
    await runner.started.wait()  # the device is busy with the first batch
    queued = w.submit(items(2), GROUP)
    await w.close()
    runner.release.set()
    outcomes = await asyncio.gather(*running, *queued, return_exceptions=True)
    assert all(isinstance(o, EngineClosed) for o in outcomes), outcomes
    with pytest.raises(EngineClosed):
        w.submit(items(1), GROUP)


async def test_a_cancelled_caller_is_skipped_not_run(executor):
    runner = FakeRunner()
    w = worker(runner, executor)
    futures = w.submit(items(7, 8), GROUP)
    futures[0].cancel()
    assert (await futures[1]).outputs.score == 8.0
    assert [7] not in runner.batches and all(7 not in b for b in runner.batches)
    assert w.pending_items == 0
    await w.close()


async def test_a_failing_statistics_hook_still_answers_every_item(executor, caplog):
    def broken(stats: BatchStats) -> None:
        raise RuntimeError("metrics backend down")

    w = worker(FakeRunner(), executor, on_batch=broken)
    assert [r.outputs.score for r in await asyncio.gather(*w.submit(items(1, 2), GROUP))] == [1.0, 2.0]
    assert [r for r in caplog.records if r.levelname == "ERROR" and "statistics" in r.getMessage()]
    assert [r.outputs.score for r in await asyncio.gather(*w.submit(items(3), GROUP))] == [3.0]
    await w.close()
