"""The per-model loop around the pure ``Batcher``: admit, form batches, run them on the device executor.

Two tasks cooperate. The *former* turns queued items into batches (flushing at once when the device
is idle, otherwise waiting until a batch is full or its oldest item has waited ``max_wait_s``) and
hands them over a capacity-1 queue, so exactly one prepared batch waits while the model runs. The
*runner* executes each batch on the device's single-thread executor and resolves every item's future.
Once the device has sat idle for ``idle_after_s``, the runner calls ``on_idle`` on that executor
(the engine returns freed memory to the OS there); after every batch it queues ``after_batch`` there
too (the engine's rate-limited trim for a server that is never idle), once the batch's answers are out.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from sie.adapters.batch import ItemOutputs, Prepared
from sie.catalog.errors import InvalidInput
from sie.engine.batcher import Batcher, BatchLimits, Entry
from sie.engine.device_thread import DeviceThread
from sie.engine.errors import (
    EngineClosed,
    InferenceFailed,
    OutOfMemory,
    Overloaded,
    ResourceExhausted,
    future_safe,
)
from sie.engine.oom import OomAction, OomRecovery

log = logging.getLogger(__name__)


class BatchRunner(Protocol):
    """Runs a batch on the device executor, given each item's group (all equal): per-item outputs, the
    forward's and the postprocessing's seconds, or ``OutOfMemory``. After that, ``free_caches`` frees
    the allocator's caches, and ``run_split`` runs the batch in parts (``OutOfMemory`` when even the
    parts at ``max_depth`` do not fit)."""

    def run(self, batch: list[Prepared], groups: Sequence[Any]) -> tuple[list[ItemOutputs], float, float]: ...

    def free_caches(self) -> None: ...

    def run_split(
        self, batch: list[Prepared], groups: Sequence[Any], max_depth: int
    ) -> tuple[list[ItemOutputs], float, float]: ...


class Timer(Protocol):
    def cancel(self) -> None: ...


# Schedules a call after a delay, as ``loop.call_later`` does; tests pass a clock of their own.
CallLater = Callable[[float, Callable[[], object]], Timer]


@dataclass(frozen=True)
class WorkerLimits:
    batch: BatchLimits
    max_pending_items: int  # queued or running at once (``SIE_MAX_CONCURRENT_REQUESTS``)
    pipeline_depth: int = 2  # batches at once: one running, the rest formed and waiting


@dataclass(frozen=True)
class DeviceHousekeeping:
    """The device's memory policy, which the batching loop only calls at the right moments: after
    ``idle_after_s`` idle (return freed memory to the OS), after every batch once its answers are out
    (a rate-limited trim for a server that is never idle), and on out of memory (evict another model;
    True means one was, and the batch is worth running again), as far as ``oom`` allows. The first
    two run on the device executor."""

    on_idle: Callable[[], object] | None = None
    after_batch: Callable[[], object] | None = None
    after_batch_due: Callable[[], bool] = lambda: True  # checked on the loop before queueing it
    on_oom: Callable[[], Awaitable[bool]] | None = None
    idle_after_s: float = 1.0
    oom: OomRecovery = field(default_factory=OomRecovery)


@dataclass(frozen=True)
class Clocks:
    """The worker's time: ``now`` for queueing and batching, ``call_later`` for the idle timer (the
    event loop's when None)."""

    now: Callable[[], float] = time.perf_counter
    call_later: CallLater | None = None


@dataclass
class ItemResult:
    outputs: ItemOutputs
    queue_ms: float
    inference_ms: float
    postprocessing_ms: float


@dataclass
class Work:
    prepared: Prepared
    future: asyncio.Future[ItemResult]
    enqueued_at: float
    batched_at: float = field(default=0.0)
    request: int = 0  # which ``submit`` queued it: the requests a batch combines


@dataclass(frozen=True)
class BatchStats:
    """One batch that ran: its items and their tokens (costs), the forward's seconds, the requests its
    items came from, its longest item's cost and how long its oldest item waited in the queue."""

    items: int
    tokens: int
    seconds: float
    requests: int = 1
    longest: int = 0
    wait_s: float = 0.0


def _stats(batch: list[Entry[Work]], infer_s: float, started: float) -> BatchStats:
    costs = [entry.cost for entry in batch]
    return BatchStats(
        len(batch),
        sum(costs),
        infer_s,
        requests=len({entry.payload.request for entry in batch}),
        longest=max(costs),
        wait_s=started - min(entry.payload.enqueued_at for entry in batch),
    )


class ModelWorker:
    def __init__(
        self,
        name: str,
        runner: BatchRunner,
        limits: WorkerLimits,
        executor: DeviceThread,
        housekeeping: DeviceHousekeeping = DeviceHousekeeping(),
        on_batch: Callable[[BatchStats], None] = lambda stats: None,
        clocks: Clocks = Clocks(),
    ) -> None:
        self.name = name
        self._runner = runner
        self._guarded_run = future_safe(runner.run)  # made once: a batch is a hot path
        self._batcher: Batcher[Work] = Batcher(limits.batch)
        self._executor = executor
        self._max_pending = limits.max_pending_items
        self._on_batch = on_batch
        self._clock = clocks.now
        self._call_later = clocks.call_later
        self._housekeeping = housekeeping
        self._idle_timer: Timer | None = None
        # The next batches are formed while one runs, so the device never waits on batch formation.
        self._ready: asyncio.Queue[list[Entry[Work]]] = asyncio.Queue(
            maxsize=max(1, limits.pipeline_depth - 1)
        )
        self._wakeup = asyncio.Event()
        self._device_idle = True
        self._pending = 0
        self._submits = itertools.count()
        self._closed = False
        self._stopped: InferenceFailed | None = None  # set when a loop died: new work is refused
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def pending_items(self) -> int:
        return self._pending

    def start(self) -> None:
        for loop in (self._form_loop, self._run_loop):
            task = asyncio.create_task(loop(), name=f"{self.name}:{loop.__name__}")
            task.add_done_callback(self._on_task_done)
            self._tasks.append(task)

    def submit(self, prepared: list[Prepared], group: Hashable) -> list[asyncio.Future[ItemResult]]:
        """Queue one request's items; raises ``Overloaded`` instead of letting the queue grow unbounded."""
        if self._closed:
            raise self._shutting_down()
        if self._stopped is not None:
            raise self._stopped
        if len(prepared) > self._max_pending:
            raise InvalidInput(
                f"Request has {len(prepared)} items; model '{self.name}' admits at most "
                f"{self._max_pending} at once (SIE_MAX_CONCURRENT_REQUESTS). Split the request."
            )
        if self._pending + len(prepared) > self._max_pending:
            raise Overloaded(
                f"Model '{self.name}' has {self._pending} items queued; "
                f"{len(prepared)} more would pass the limit of {self._max_pending}"
            )
        loop = asyncio.get_running_loop()
        now = self._clock()
        request = next(self._submits)
        futures: list[asyncio.Future[ItemResult]] = []
        for item in prepared:
            future: asyncio.Future[ItemResult] = loop.create_future()
            future.add_done_callback(self._release)
            work = Work(item, future, now, request=request)
            self._batcher.add(Entry(group, item.cost, now, work, future.done))
            futures.append(future)
        self._pending += len(prepared)
        self._wakeup.set()
        return futures

    def _release(self, _: asyncio.Future[ItemResult]) -> None:
        """Every item leaves the count exactly once: answered, failed or cancelled by its caller."""
        self._pending -= 1

    async def _form_loop(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            # Commit a batch only while the hand-off slot is free: items keep joining the queue, and so
            # the next batch, for as long as the device is busy with the previous one.
            while self._ready.empty():
                batch = self._batcher.next_batch(self._clock(), flush=self._device_idle)
                if batch is None:
                    break
                self._device_idle = False
                self._ready.put_nowait(batch)
            deadline = self._batcher.deadline()
            if deadline is not None and self._ready.empty():
                try:
                    await asyncio.wait_for(self._wakeup.wait(), max(0.0, deadline - self._clock()))
                except TimeoutError:
                    self._wakeup.set()

    async def _run_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._ready.get()
            if self._idle_timer is not None:
                self._idle_timer.cancel()
                self._idle_timer = None
            if self._batcher:  # the slot is free again: the former may prepare the next batch
                self._wakeup.set()
            live = [e for e in batch if not e.payload.future.done()]
            if live:
                try:
                    await self._run(loop, live)
                except BaseException:  # cancelled by close, or the loop itself broke: none may hang
                    self._fail(live, self._ended())
                    raise
                after_batch = self._housekeeping.after_batch
                if after_batch is not None and self._housekeeping.after_batch_due():
                    done = self._executor.run(loop, after_batch)
                    done.add_done_callback(partial(self._log_housekeeping_failure, "after-batch"))
            if self._ready.empty():
                self._device_idle = True
                if self._batcher:  # items waiting for a fuller batch go now (nothing else waits on it)
                    self._wakeup.set()
                if self._housekeeping.on_idle is not None:
                    call_later = self._call_later or loop.call_later
                    idle_after_s = self._housekeeping.idle_after_s
                    self._idle_timer = call_later(idle_after_s, partial(self._idle_housekeeping, loop))

    def _idle_housekeeping(self, loop: asyncio.AbstractEventLoop) -> None:
        """Queued on the device executor, so a batch formed meanwhile simply runs after it."""
        self._idle_timer = None
        on_idle = self._housekeeping.on_idle
        if on_idle is not None and self._device_idle and not self._closed:
            done = self._executor.run(loop, on_idle)
            done.add_done_callback(partial(self._log_housekeeping_failure, "idle"))

    def _log_housekeeping_failure(self, kind: str, done: asyncio.Future[object]) -> None:
        error = None if done.cancelled() else done.exception()
        if error is not None:
            log.warning("%s housekeeping for model %s failed: %r", kind, self.name, error)

    async def _run(self, loop: asyncio.AbstractEventLoop, batch: list[Entry[Work]]) -> None:
        started = self._clock()
        for entry in batch:
            entry.payload.batched_at = started
        try:
            outputs, infer_s, post_s = await self._recovering(loop, batch)
        except Exception as exc:
            if isinstance(exc, ResourceExhausted):
                log.warning("model %s: %s", self.name, exc)
                error: Exception = exc
            else:
                log.exception("forward pass failed for model %s", self.name)
                error = InferenceFailed(f"Inference failed for model '{self.name}': {type(exc).__name__}")
                error.__cause__ = exc
            self._fail(batch, error)
            return
        for entry, item in zip(batch, outputs, strict=True):
            work = entry.payload
            if not work.future.done():
                queue_ms = (work.batched_at - work.enqueued_at) * 1000
                work.future.set_result(ItemResult(item, queue_ms, infer_s * 1000, post_s * 1000))
        try:  # after the answers: a broken statistics hook must not hold a request
            self._on_batch(_stats(batch, infer_s, started))
        except Exception:
            log.exception("batch statistics for model %s failed", self.name)

    async def _recovering(
        self, loop: asyncio.AbstractEventLoop, batch: list[Entry[Work]]
    ) -> tuple[list[ItemOutputs], float, float]:
        """Run the batch; out of memory tries the recovery plan's steps in order (``engine.oom``): free
        caches and run again, evict another model and run again, run it split (the last step, whatever
        follows it). Out of memory after the last step, or with recovery off, is
        ``ResourceExhausted``."""
        prepared, groups = [e.payload.prepared for e in batch], [e.group for e in batch]
        run = self._guarded_run
        try:
            return await self._executor.run(loop, run, prepared, groups)
        except OutOfMemory as exc:
            failure = exc
        plan = self._housekeeping.oom
        for action in plan.steps():
            try:
                if action is OomAction.SPLIT_BATCH:
                    log.warning(
                        "model %s: out of memory for %d items; running the batch split", self.name, len(batch)
                    )
                    split = future_safe(partial(self._runner.run_split, max_depth=plan.max_split_depth))
                    return await self._executor.run(loop, split, prepared, groups)
                if action is OomAction.CACHE_CLEAR:
                    log.warning(
                        "out of memory in a batch of %d items; freeing caches and running it again",
                        len(batch),
                    )
                    await self._executor.run(loop, future_safe(self._runner.free_caches))
                elif not await self._evicted(plan.eviction_lock_timeout_s):
                    continue
                return await self._executor.run(loop, run, prepared, groups)
            except OutOfMemory as exc:
                failure = exc
        steps = ", ".join(plan.steps()) or "recovery off"
        raise ResourceExhausted(
            f"Out of memory for a batch of {len(batch)} item(s) after {steps}; retry later or send smaller "
            "requests",
            plan.retry_after_s,
        ) from failure

    async def _evicted(self, timeout_s: float) -> bool:
        """Whether another model was evicted to make room, waiting ``timeout_s`` at most: an eviction
        still draining its model's batches then goes on unawaited, and the plan's next step runs."""
        on_oom = self._housekeeping.on_oom
        if on_oom is None:
            return False
        eviction = asyncio.ensure_future(on_oom())
        done, _ = await asyncio.wait({eviction}, timeout=timeout_s)
        if not done:
            log.warning("model %s: evicting another model took over %gs; not waiting", self.name, timeout_s)
            eviction.add_done_callback(partial(self._log_housekeeping_failure, "eviction"))
            return False
        return eviction.result()

    def _shutting_down(self) -> EngineClosed:
        return EngineClosed(f"Model '{self.name}' is shutting down")

    def _loop_stopped(self) -> InferenceFailed:
        return InferenceFailed(f"Model '{self.name}' worker stopped")

    def _ended(self) -> Exception:
        """What the items of a loop that ended are told."""
        return self._shutting_down() if self._closed else self._loop_stopped()

    @staticmethod
    def _fail(batch: list[Entry[Work]], error: Exception) -> None:
        for entry in batch:
            if not entry.payload.future.done():
                entry.payload.future.set_exception(error)

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        """A loop that ends before ``close`` leaves nothing to run queued work: fail it, and refuse
        new work from then on instead of queueing it forever."""
        if task.cancelled() and self._closed:
            return
        cause = task.exception() if not task.cancelled() else None
        log.error("worker loop for %s stopped: %r", self.name, cause)
        self._stopped = self._loop_stopped()
        self._stopped.__cause__ = cause
        self._fail_all(self._stopped)

    def _fail_all(self, error: Exception) -> None:
        while (batch := self._batcher.next_batch(self._clock(), flush=True)) is not None:
            self._fail(batch, error)
        while not self._ready.empty():
            self._fail(self._ready.get_nowait(), error)

    async def close(self) -> None:
        """Stop intake, cancel the loops, and fail whatever is still queued."""
        self._closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._fail_all(self._shutting_down())
