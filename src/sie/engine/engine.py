"""The engine facade both front ends call: model states, tokenization, batching workers, results.

A request goes: resolve the model id (and profile variant) → gate on its state (a cold model starts
loading and the caller gets ``ModelLoading``) → plan options → tokenize on the CPU pool → queue on the
model's worker → await every item → assemble a typed response.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final

from sie.core import heap
from sie.core.options import OutputDType, OutputType
from sie.engine.batcher import BatchLimits
from sie.engine.catalog import Catalog, CatalogEntry
from sie.engine.encode_plan import EncodePlan, plan_encode
from sie.engine.errors import (
    EngineClosed,
    InvalidInput,
    ModelLoadFailed,
    ModelLoading,
    ModelNotFound,
    require_items,
)
from sie.engine.loader import LoadedModel, LoadSettings, ModelLoader, ModelSlot, ModelState
from sie.engine.worker import BatchStats, DenseGroup, ItemResult, ModelWorker
from sie.observability.metrics import Metrics
from sie.postprocess.quantize import wire_dtype_name
from sie.wire.requests import EncodeParams, Item
from sie.wire.responses import DenseVector, EncodeResult, Timing

log = logging.getLogger(__name__)

# Requests with at most this many characters of text are tokenized on the event loop: a 10-word text
# takes 33 us there, while handing it to the pool costs the loop 55 us and the request ~120 us (two
# thread wake-ups). Longer texts go to the pool so the loop keeps admitting requests meanwhile.
INLINE_TOKENIZE_CHARS: Final = 160


@dataclass(frozen=True)
class EngineLimits:
    max_batch_items: int
    max_batch_wait_ms: float
    max_pending_items: int
    preprocessor_workers: int


@dataclass(frozen=True)
class EncodeOutcome:
    model: str
    items: list[EncodeResult]
    timing: Timing
    tokens: int


class Engine:
    def __init__(self, catalog: Catalog, load: LoadSettings, limits: EngineLimits, metrics: Metrics) -> None:
        self.catalog = catalog
        self.device = load.device
        self._limits = limits
        self._metrics = metrics
        self._slots = {name: ModelSlot(catalog.get(name)) for name in catalog.names()}  # type: ignore[arg-type]
        self._workers: dict[str, ModelWorker] = {}
        self._tokenize_pool = ThreadPoolExecutor(limits.preprocessor_workers, thread_name_prefix="sie-tok")
        # Every load and forward runs on this one thread: see loader.load_and_warm_up for why.
        self._device_executor = ThreadPoolExecutor(1, thread_name_prefix="sie-device")
        self._loader = ModelLoader(load, self._start_worker, self._device_executor)
        self._closed = False

    async def preload(self, names: list[str]) -> None:
        """Load ``names`` one after another before serving; a failure is logged, not fatal."""
        for name in names:
            await self._loader.start_load(self._slot(name))

    def slots(self) -> list[ModelSlot]:
        return list(self._slots.values())

    def _slot(self, name: str) -> ModelSlot:
        slot = self._slots.get(name)
        if slot is None:
            raise ModelNotFound(name)
        return slot

    def entry(self, name: str) -> CatalogEntry:
        return self._slot(name).entry

    def _start_worker(self, slot: ModelSlot) -> None:
        model = slot.model
        assert model is not None
        name = slot.entry.name
        limits = BatchLimits(
            max_tokens=slot.entry.profile.max_batch_tokens,
            max_items=self._limits.max_batch_items,
            max_wait_s=self._limits.max_batch_wait_ms / 1000,
        )
        worker = ModelWorker(
            name,
            model.encoder,
            model.tokenizer.pad_id,
            limits,
            self._device_executor,
            self._limits.max_pending_items,
            on_batch=lambda stats: self._record_batch(name, stats),
            on_idle=heap.return_free_memory,
        )
        worker.start()
        self._workers[name] = worker
        self._metrics.model_loaded.labels(name, model.device).set(1)

    def _record_batch(self, name: str, stats: BatchStats) -> None:
        self._metrics.batch_size.labels(name).observe(stats.items)
        self._metrics.batch_tokens.labels(name).observe(stats.tokens)
        self._metrics.tokens.labels(name).inc(stats.tokens)

    def ready_model(self, name: str) -> tuple[LoadedModel, ModelWorker]:
        """The loaded model, or why not: ``ModelLoading`` (load started) or ``ModelLoadFailed``."""
        if self._closed:
            raise EngineClosed("The server is shutting down")
        slot = self._slot(name)
        if slot.state is ModelState.LOADED and slot.model is not None:
            return slot.model, self._workers[name]
        if slot.state is ModelState.FAILED and not self._loader.can_retry(slot):
            failure = slot.failure
            assert failure is not None
            raise ModelLoadFailed(name, failure.reason, failure.attempts, failure.permanent)
        self._loader.start_load(slot)
        raise ModelLoading(name)

    async def wait_loaded(self, name: str) -> None:
        """Load synchronously. The OpenAI route does this (as public SIE 0.3 did; 0.10 answers 503) because
        OpenAI clients do not honour ``Retry-After`` and a model loads in seconds."""
        slot = self._slot(name)
        if slot.state is ModelState.FAILED and not self._loader.can_retry(slot):
            return  # ready_model() reports the recorded failure
        if slot.state is not ModelState.LOADED:
            await asyncio.shield(self._loader.start_load(slot))

    def resolve(self, name: str, params: EncodeParams | None) -> str:
        self._slot(name)
        profile = (params.options or {}).get("profile") if params else None
        if profile is not None and not isinstance(profile, str):
            raise InvalidInput(f"Option 'profile' must be str, got {type(profile).__name__}")
        variant = self.catalog.for_profile(name, profile)
        if variant not in self._slots:
            available = ", ".join(sorted(self.entry(name).config.profiles))
            raise InvalidInput(f"Unknown profile '{profile}' for model '{name}'. Available: {available}")
        return variant

    def plan(self, name: str, params: EncodeParams | None) -> EncodePlan:
        entry = self.entry(name)
        return plan_encode(name, entry.config.output_types(), entry.profile.runtime, params)

    async def encode(self, name: str, items: list[Item], params: EncodeParams | None) -> EncodeOutcome:
        started = time.perf_counter()
        require_items(items)
        name = self.resolve(name, params)
        plan = self.plan(name, params)
        model, worker = self.ready_model(name)
        if OutputType.DENSE not in plan.output_types:
            raise InvalidInput(f"Model '{name}' cannot produce {[t.value for t in plan.output_types]}")
        texts = [plan.text_for(item, "SentenceTransformer") for item in items]
        tok_start = time.perf_counter()
        if sum(map(len, texts)) <= INLINE_TOKENIZE_CHARS:
            sequences = model.tokenizer.encode(texts)
        else:
            loop = asyncio.get_running_loop()
            sequences = await loop.run_in_executor(self._tokenize_pool, model.tokenizer.encode, texts)
        tokenization_ms = (time.perf_counter() - tok_start) * 1000
        group = DenseGroup(plan.pooling or model.encoder.default_pooling, plan.normalize, plan.output_dtype)
        futures = worker.submit(sequences, group)
        self._metrics.queue_depth.labels(name).set(worker.pending_items)
        try:
            results: list[ItemResult] = await asyncio.gather(*futures)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        dims = model.encoder.dims
        dtype = plan.output_dtype
        encoded = [
            EncodeResult(id=item.id, dense=DenseVector(dims, wire_dtype_name(dtype), result.vector))
            for item, result in zip(items, results, strict=True)
        ]
        post = max(r.postprocessing_ms for r in results) if dtype is not OutputDType.FLOAT32 else None
        timing = Timing(
            total_ms=(time.perf_counter() - started) * 1000,
            queue_ms=max(r.queue_ms for r in results),
            tokenization_ms=tokenization_ms,
            inference_ms=max(r.inference_ms for r in results),
            postprocessing_ms=post,
        )
        return EncodeOutcome(name, encoded, timing, sum(len(s) for s in sequences))

    async def detokenize(self, name: str, token_lists: list[list[int]]) -> list[str]:
        """Text for token-id inputs (OpenAI clients may send ids); ids outside the vocabulary are invalid."""
        await self.wait_loaded(name)
        model, _ = self.ready_model(name)
        vocab = model.tokenizer.vocab_size
        for ids in token_lists:
            bad = next((i for i in ids if not 0 <= i < vocab), None)
            if bad is not None:
                raise InvalidInput(
                    f"Token id {bad} is outside the vocabulary of model '{name}' (size {vocab})"
                )
        return [model.tokenizer.decode(ids) for ids in token_lists]

    async def close(self) -> None:
        """Stop intake, fail queued work, unload models, stop the pools; the event loop only awaits.

        Models are closed on the device thread, where they were loaded and ran (freeing device memory
        and collecting their objects takes a while), and the pools are joined off the loop."""
        self._closed = True
        await asyncio.gather(*(w.close() for w in self._workers.values()))
        loop = asyncio.get_running_loop()
        for slot in self._slots.values():
            if slot.task is not None and not slot.task.done():
                slot.task.cancel()
            if slot.model is not None:
                encoder, slot.model = slot.model.encoder, None
                await loop.run_in_executor(self._device_executor, encoder.close)
        self._tokenize_pool.shutdown(wait=False, cancel_futures=True)
        await asyncio.to_thread(self._device_executor.shutdown, wait=True, cancel_futures=True)
