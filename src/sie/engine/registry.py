"""The served models and their states: the one writer of every ``ModelSlot``.

A slot goes AVAILABLE → LOADING → LOADED (or FAILED, remembered until its cooldown ends) → UNLOADING →
AVAILABLE. Loads start in the background on first use; a model is evicted under memory pressure, after
``idle_evict_s`` idle, or when another one runs out of memory, never while a request holds it or has
items queued (``Residency``), and never when it is pinned (``SIE_PINNED_MODELS``: loaded at start, and
again whenever its config arrives or changes). A loaded model has one ``ModelWorker`` (its batching loop) and, when its
adapter takes LoRAs, one ``Loras``: only the LoRAs its profiles declare or the LoRA root holds
(``weights.lora_sources``). Every load and forward runs on the one device thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from sie.adapters.contract import Adapter, SchedulesItsOwn, TakesLora
from sie.catalog.admission import RequestLimits
from sie.catalog.catalog import Catalog, CatalogEntry
from sie.catalog.errors import InvalidInput, ModelNotFound
from sie.catalog.options import LoraNotAllowed
from sie.core import heap
from sie.engine.batcher import BatchLimits
from sie.engine.device_thread import DeviceThread
from sie.engine.errors import EngineClosed, ModelLoadFailed, ModelLoading
from sie.engine.instrumentation import BatchStatistics
from sie.engine.loader import (
    LoadedModel,
    LoadSettings,
    ModelLoader,
    ModelSlot,
    ModelState,
    can_retry,
    failure_after,
)
from sie.engine.loras import Loras
from sie.engine.memory import gauge_for
from sie.engine.oom import OomRecovery
from sie.engine.pixels import ImageLimits
from sie.engine.residency import Residency
from sie.engine.runner import ModelRunner
from sie.engine.worker import BatchStats, DeviceHousekeeping, ModelWorker, WorkerLimits
from sie.observability.metrics import Metrics
from sie.weights.errors import WeightsNotFound
from sie.weights.lora_sources import LoraSources

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineLimits:
    max_batch_items: int
    max_batch_wait_ms: float
    max_pending_items: int
    preprocessor_workers: int
    max_loras_per_model: int = 10
    instrumentation: bool = False  # SIE_INSTRUMENTATION: per-batch log lines and a summary per model
    image_workers: int = 1  # SIE_IMAGE_WORKERS: threads for requests that carry images
    memory_threshold_percent: float = 85.0
    idle_evict_s: float | None = None
    pinned: frozenset[str] = frozenset()  # SIE_PINNED_MODELS: never chosen for eviction
    memory_limit_bytes: int | None = None  # a budget for model weights instead of the device's gauge
    memory_check_s: float = 1.0
    # SIE_MAX_ITEM_TEXT_BYTES, SIE_MAX_ITEMS_PER_REQUEST
    request: RequestLimits = field(default_factory=RequestLimits)
    # SIE_MAX_IMAGE_PIXELS, SIE_MAX_REQUEST_PIXELS, SIE_MAX_INFLIGHT_PIXELS
    images: ImageLimits = field(default_factory=ImageLimits)
    pipeline_depth: int = 2  # batches per model at once: one running, the rest formed and waiting
    oom_recovery: OomRecovery = field(default_factory=OomRecovery)  # SIE_OOM_RECOVERY__*


@dataclass(frozen=True)
class Held:
    """A loaded model held for one request: its adapter and the worker that batches for it."""

    name: str
    model: LoadedModel
    worker: ModelWorker


class ModelRegistry:
    def __init__(self, catalog: Catalog, load: LoadSettings, limits: EngineLimits, metrics: Metrics) -> None:
        self.catalog = catalog
        self.device = load.device
        self._limits = limits
        self._metrics = metrics
        self._slots = {entry.name: ModelSlot(entry) for entry in catalog.entries()}
        self._workers: dict[str, ModelWorker] = {}
        self._loras: dict[str, Loras] = {}
        self._statistics: dict[str, BatchStatistics] = {}  # with SIE_INSTRUMENTATION only
        self._lora_sources = LoraSources(load.weights, load.loras)
        self._residency = Residency()
        self._gauge = gauge_for(load.device, limits.memory_limit_bytes, self._loaded_bytes)
        self._watcher: asyncio.Task[None] | None = None
        # Every load and forward runs on this one thread: see loader.load_and_warm_up for why.
        self.device_executor = DeviceThread("sie-device")
        self._busy_trim = heap.PeriodicTrim()  # runs on that one thread, for every model's batches
        self._loader = ModelLoader(
            load,
            self.device_executor,
            self._make_room,
            lambda entry: self._evict_other(entry.name, "out of memory loading"),
        )
        self._closed = False

    def start(self) -> None:
        """Background work that needs the running loop: the memory and idle watcher."""
        if self._watcher is None:
            self._watcher = asyncio.create_task(self._watch_memory(), name="sie-memory-watcher")

    async def preload(self, names: list[str]) -> None:
        """Load ``names`` one after another before serving; a failure is logged, not fatal."""
        for name in names:
            await self._start_load(self._slot(name))

    def slots(self) -> list[ModelSlot]:
        return list(self._slots.values())

    def queue_depth(self, name: str) -> int:
        """Items queued or running on the model's worker, and a generative model's generations
        running; 0 when it has none (not loaded)."""
        worker = self._workers.get(name)
        pending = worker.pending_items if worker is not None else 0
        slot = self._slots.get(name)
        adapter = slot.model.adapter if slot is not None and slot.model is not None else None
        if isinstance(adapter, SchedulesItsOwn):
            pending += adapter.running
        return pending

    @property
    def max_pending(self) -> int:
        """How many items (or generations) one model may have queued and running
        (``SIE_MAX_CONCURRENT_REQUESTS``)."""
        return self._limits.max_pending_items

    def require(self, name: str) -> CatalogEntry:
        """The entry of a served id, else ``ModelNotFound``: routes call it before reading a body, so an
        unknown model answers 404 without the body being decoded."""
        return self._slot(name).entry

    def _slot(self, name: str) -> ModelSlot:
        slot = self._slots.get(name)
        if slot is None:
            raise ModelNotFound(name)
        return slot

    # -- loading ------------------------------------------------------------------------------------

    def _start_load(self, slot: ModelSlot) -> asyncio.Task[None]:
        if slot.task is None or slot.task.done():
            slot.state = ModelState.LOADING
            slot.task = asyncio.create_task(self._load(slot), name=f"load:{slot.entry.name}")
        return slot.task

    async def _load(self, slot: ModelSlot) -> None:
        try:
            model = await self._loader.load(slot.entry)
        except Exception as exc:
            slot.failure = failure_after(slot.entry.name, exc, slot.failure)
            slot.state, slot.model = ModelState.FAILED, None
            return
        slot.model, slot.failure, slot.state = model, None, ModelState.LOADED
        self._start_worker(slot.entry, model)

    def _start_worker(self, entry: CatalogEntry, model: LoadedModel) -> None:
        name = entry.name
        max_tokens = entry.profile.max_batch_tokens
        limits = BatchLimits(
            max_tokens=max_tokens,
            max_items=self._limits.max_batch_items,
            max_wait_s=self._limits.max_batch_wait_ms / 1000,
        )
        runner = ModelRunner(model.adapter, max_tokens, model.muvera)
        housekeeping = DeviceHousekeeping(
            on_idle=heap.return_free_memory,
            after_batch=self._busy_trim,
            after_batch_due=self._busy_trim.due,
            on_oom=lambda: self._evict_other(name, "out of memory in a batch of"),
            oom=self._limits.oom_recovery,
        )
        worker = ModelWorker(
            name,
            runner,
            WorkerLimits(limits, self._limits.max_pending_items, self._limits.pipeline_depth),
            self.device_executor,
            housekeeping,
            on_batch=lambda stats: self._record_batch(name, stats),
        )
        worker.start()
        self._workers[name] = worker
        self._metrics.queue_depth.labels(name).set_function(lambda: self.queue_depth(name))
        self._residency.loaded(name)
        if self._limits.instrumentation:
            self._statistics[name] = BatchStatistics(name, model.adapter.packs_tokens)
        if isinstance(model.adapter, TakesLora):
            loras = Loras(
                name,
                model.adapter,
                self._limits.max_loras_per_model,
                partial(self._locate_lora, entry),
                self.device_executor,
            )
            self._loras[name] = loras
            profile_lora = entry.profile.runtime.get("lora_id")
            if isinstance(profile_lora, str):
                loras.preload(profile_lora)
        self._metrics.model_loaded.labels(name, model.device).set(1)

    def _record_batch(self, name: str, stats: BatchStats) -> None:
        metrics = self._metrics
        metrics.labelled(metrics.batch_size, name).observe(stats.items)
        metrics.labelled(metrics.batch_tokens, name).observe(stats.tokens)
        metrics.labelled(metrics.tokens, name).inc(stats.tokens)
        statistics = self._statistics.get(name)
        if statistics is not None:
            statistics.record(stats)

    def _locate_lora(self, entry: CatalogEntry, lora_id: str) -> Path:
        """A LoRA's folder (on a thread: it may fetch): a declared one from its sources, else the LoRA
        root's folder of that name, which ``lora`` saw there."""
        if lora_id in entry.config.loras:
            return self._lora_sources.declared(lora_id, entry.config_dir)
        folder = self._lora_sources.under_root(lora_id)
        if folder is None:
            raise WeightsNotFound(f"LoRA {lora_id!r} is no longer in the LoRA root")
        return folder

    def _check_lora(self, entry: CatalogEntry, lora_id: str) -> None:
        """Before a LoRA is looked for or remembered: one its model's profiles declare, or a folder in
        the LoRA root. Admission already refused paths and undeclared Hub ids; this is the check a
        gateway cannot make, and the same again for a caller that skipped admission."""
        declared = entry.config.loras
        if lora_id not in declared and self._lora_sources.under_root(lora_id) is None:
            raise LoraNotAllowed(entry.name, lora_id, declared, self._lora_sources.root_names())

    # -- serving ------------------------------------------------------------------------------------

    def ready(self, name: str) -> tuple[LoadedModel, ModelWorker]:
        """The loaded model, or why not: ``ModelLoading`` (load started) or ``ModelLoadFailed``."""
        if self._closed:
            raise EngineClosed("The server is shutting down")
        slot = self._slot(name)
        if slot.state is ModelState.LOADED and slot.model is not None:
            return slot.model, self._workers[name]
        if slot.state is ModelState.UNLOADING:
            raise ModelLoading(name)  # evicted just now; the next request after it starts a load
        failure = slot.failure
        if slot.state is ModelState.FAILED and failure is not None and not can_retry(failure):
            raise ModelLoadFailed(
                name, failure.reason, failure.attempts, failure.permanent, failure.error_class.value
            )
        self._start_load(slot)
        raise ModelLoading(name)

    async def wait_loaded(self, name: str) -> None:
        """Load synchronously; ``ready`` then reports a failed load. The OpenAI and rerank routes do this
        (as public SIE 0.3 did; 0.10 answers 503) because their clients do not honour ``Retry-After``
        and a model loads in seconds."""
        slot = self._slot(name)
        if slot.state is ModelState.FAILED and not can_retry(slot.failure):
            return
        if slot.state is not ModelState.LOADED:
            await asyncio.shield(self._start_load(slot))

    @contextmanager
    def hold(self, name: str) -> Iterator[Held]:
        """The loaded model held for one request: it counts as used, and is not evicted under it."""
        model, worker = self.ready(name)
        self._residency.hold(name)
        try:
            yield Held(name, model, worker)
        finally:
            self._residency.release(name)

    def lora(self, held: Held, lora_id: str | None) -> AbstractContextManager[str | None]:
        """The request's LoRA held for its duration (``Loras.using``); None runs the base model."""
        if lora_id is None:
            return nullcontext(None)
        loras = self._loras.get(held.name)
        if loras is None:
            raise InvalidInput(
                f"Model '{held.name}' does not support LoRA adapters ({held.model.adapter.family} adapter)"
            )
        self._check_lora(self._slot(held.name).entry, lora_id)
        return loras.using(lora_id)

    # -- eviction -----------------------------------------------------------------------------------

    def _loaded_names(self) -> list[str]:
        return [n for n, slot in self._slots.items() if slot.state is ModelState.LOADED]

    def _loaded_bytes(self) -> int:
        return sum(slot.model.memory_bytes for slot in self._slots.values() if slot.model is not None)

    def _busy(self, name: str) -> bool:
        return self.queue_depth(name) > 0

    def _under_pressure(self) -> bool:
        return self._gauge.used_percent() > self._limits.memory_threshold_percent

    async def _make_room(self, entry: CatalogEntry) -> None:
        """Before a load: evict least recently used idle models while the device is over the threshold."""
        while self._under_pressure():
            victims = self._residency.least_recent(self._loaded_names(), self._busy, self._kept(entry.name))
            if not victims:
                return
            await self._unload(victims[0], f"memory pressure before loading {entry.name}")

    async def _evict_other(self, name: str, why: str) -> bool:
        """Out of memory for ``name`` (loading it, or in its batch): evict the least recently used other
        idle model so it can try once more; False when there is none."""
        victims = self._residency.least_recent(self._loaded_names(), self._busy, self._kept(name))
        if not victims:
            return False
        await self._unload(victims[0], f"{why} {name}")
        return True

    def _kept(self, name: str) -> frozenset[str]:
        """What eviction for ``name`` may not take: ``name`` itself and the pinned models."""
        return self._limits.pinned | {name}

    async def _watch_memory(self) -> None:
        """Every ``memory_check_s``: under pressure, evict the least recently used idle model (never the
        only loaded one); with ``idle_evict_s``, unload one model idle that long (even the only one)."""
        idle_after = self._limits.idle_evict_s
        while True:
            await asyncio.sleep(self._limits.memory_check_s)
            try:
                loaded = self._loaded_names()
                if len(loaded) > 1 and self._under_pressure():
                    victims = self._residency.least_recent(loaded, self._busy, self._limits.pinned)
                    if victims:
                        await self._unload(victims[0], f"{self._gauge.describe()} over the threshold")
                        continue
                if idle_after is not None:
                    idle = [
                        n
                        for n in self._residency.least_recent(
                            self._loaded_names(), self._busy, self._limits.pinned
                        )
                        if self._residency.idle_for(n) >= idle_after
                    ]
                    if idle:
                        await self._unload(idle[0], f"idle for {idle_after:g} s")
            except Exception:
                log.exception("memory watcher step failed")

    async def _unload(self, name: str, why: str) -> None:
        """Stop the model's worker (nothing is queued: victims are idle), close its LoRAs and the
        adapter on the device thread, and make the slot loadable again."""
        slot = self._slots[name]
        model = slot.model
        if model is None or slot.state is not ModelState.LOADED:
            return
        slot.state = ModelState.UNLOADING
        loras = self._loras.pop(name, None)
        if loras is not None:
            loras.close()
        worker = self._workers.pop(name, None)
        if worker is not None:
            await worker.close()
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self.device_executor, model.adapter.close)
            await loop.run_in_executor(self.device_executor, heap.return_free_memory)
        finally:
            slot.model, slot.task, slot.state = None, None, ModelState.AVAILABLE
            self._residency.forget(name)
            self._metrics.model_loaded.labels(name, model.device).set(0)
            self._metrics.queue_depth.labels(name).set(0)
            statistics = self._statistics.pop(name, None)
            if statistics is not None:
                statistics.log_summary()
        log.info("unloaded %s (%s; it held %.1f MB)", name, why, model.memory_bytes / 1e6)

    # -- hot reload and shutdown ----------------------------------------------------------------------

    async def apply_catalog(self, catalog: Catalog, drain_s: float = 30.0) -> None:
        """Serve ``catalog`` from now on (hot reload): new ids become loadable; a changed id finishes its
        requests in flight on the old config, is unloaded, and loads again with the new one if it was
        loaded (its failure record cleared); a deleted id finishes its requests, is unloaded and gone."""
        old = self.catalog
        added = [n for n in catalog.names() if n not in old]
        removed = [n for n in old.names() if n not in catalog]
        changed = [n for n in catalog.names() if n in old and catalog[n] != old[n]]
        self.catalog = catalog
        for name in added:
            self._slots[name] = ModelSlot(catalog[name])
            if name in self._limits.pinned:
                self._start_load(self._slots[name])
        for name in removed + changed:
            slot = self._slots[name]
            if slot.task is not None and not slot.task.done():
                await asyncio.shield(slot.task)  # a load under way finishes first
            was_loaded = slot.state is ModelState.LOADED
            await self._drain(name, drain_s)
            await self._unload(name, "its config changed" if name in changed else "its config was deleted")
            if name in removed:
                del self._slots[name]
                continue
            self._slots[name] = ModelSlot(catalog[name])
            if was_loaded or name in self._limits.pinned:
                self._start_load(self._slots[name])
        if added or removed or changed:
            log.info("models dir reloaded: added %s, changed %s, removed %s", added, changed, removed)

    async def _drain(self, name: str, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until no request holds the model and nothing is queued for it."""
        deadline = time.monotonic() + timeout_s
        while (self._residency.is_held(name) or self._busy(name)) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        """Stop intake, fail queued work, unload models, stop the device thread; the loop only awaits.

        Models are closed on the device thread, where they were loaded and ran (freeing device memory
        and collecting their objects takes a while: once for all of them, ``heap.one_collection``)."""
        self._closed = True
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
        for loras in self._loras.values():
            loras.close()
        await asyncio.gather(*(w.close() for w in self._workers.values()))
        for statistics in self._statistics.values():
            statistics.log_summary()
        adapters: list[Adapter] = []
        for slot in self._slots.values():
            if slot.task is not None and not slot.task.done():
                slot.task.cancel()
            if slot.model is not None:
                adapters.append(slot.model.adapter)
                slot.model = None
        await asyncio.get_running_loop().run_in_executor(self.device_executor, _close_all, adapters)
        await asyncio.to_thread(self.device_executor.shutdown, wait=True, cancel_futures=True)


def _close_all(adapters: list[Adapter]) -> None:
    with heap.one_collection():
        for adapter in adapters:
            adapter.close()
