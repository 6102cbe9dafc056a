"""The engine facade both front ends call: model states, preparation, batching workers, results.

Every operation takes one path: resolve the model id (and profile variant) → gate on its state (a
cold model starts loading and the caller gets ``ModelLoading``) → plan → ``prepare`` on the CPU pool
→ queue on the model's worker under a ``BatchGroup`` → await every item → assemble a typed response.
encode and score (and extract later) differ only in their plan and their assembly.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final

import numpy as np

from sie.adapters.base import Forward, ImageData, ModelInput, TakesLora, Task, UnsupportedInput
from sie.core import heap
from sie.core.options import Capability, OutputDType, OutputType
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
from sie.engine.inputs import image_of, text_of
from sie.engine.loader import LoadedModel, LoadSettings, ModelLoader, ModelSlot, ModelState
from sie.engine.loras import Loras
from sie.engine.memory import gauge_for
from sie.engine.residency import Residency
from sie.engine.results import encode_result, extract_result, item_id, ranked
from sie.engine.runner import BatchGroup, ModelRunner
from sie.engine.score_plan import ScorePlan, plan_score
from sie.engine.worker import BatchStats, ItemResult, ModelWorker
from sie.observability.metrics import Metrics
from sie.postprocess.outputs import Postprocess
from sie.postprocess.similarity import cosine, maxsim, sparse_dot
from sie.wire.requests import EncodeParams, ExtractParams, Item
from sie.wire.responses import EncodeResult, ExtractResult, ScoreEntry, Timing

log = logging.getLogger(__name__)

# Requests with at most this many characters of text are tokenized on the event loop: a 10-word text
# takes 33 us there, while handing it to the pool costs the loop 55 us and the request ~120 us (two
# thread wake-ups). Longer texts go to the pool so the loop keeps admitting requests meanwhile.
INLINE_TOKENIZE_CHARS: Final = 160


# Request options the engine itself reads; the rest of an extract request's options go to the adapter.
ENGINE_OPTIONS: Final = frozenset({"profile", "lora_id"})

EXTRACT_HINT: Final = (
    "does not support extraction. Use an extraction model like GLiNER, GLiClass, or Florence-2."
)

# Sparse weights are not quantised to integers: their scale carries the ranking across documents.
SPARSE_DTYPES: Final = frozenset({OutputDType.FLOAT32, OutputDType.FLOAT16})


@dataclass(frozen=True)
class EngineLimits:
    max_batch_items: int
    max_batch_wait_ms: float
    max_pending_items: int
    preprocessor_workers: int
    max_loras_per_model: int = 10
    memory_threshold_percent: float = 85.0
    idle_evict_s: float | None = None
    memory_limit_bytes: int | None = None  # a budget for model weights instead of the device's gauge
    memory_check_s: float = 1.0


@dataclass(frozen=True)
class Inference:
    """One request's items through a model: per-item results in input order."""

    results: list[ItemResult]
    tokenization_ms: float
    tokens: int

    def timing(self, started: float, postprocessed: bool) -> Timing:
        results = self.results
        return Timing(
            total_ms=(time.perf_counter() - started) * 1000,
            queue_ms=max(r.queue_ms for r in results),
            tokenization_ms=self.tokenization_ms,
            inference_ms=max(r.inference_ms for r in results),
            postprocessing_ms=max(r.postprocessing_ms for r in results) if postprocessed else None,
        )


@dataclass(frozen=True)
class EncodeOutcome:
    model: str
    items: list[EncodeResult]
    timing: Timing
    tokens: int


@dataclass(frozen=True)
class ExtractOutcome:
    model: str
    items: list[ExtractResult]
    timing: Timing
    tokens: int


@dataclass(frozen=True)
class ScoreOutcome:
    model: str
    scores: list[ScoreEntry]  # best first
    timing: Timing
    tokens: int


def _input_chars(inputs: Sequence[ModelInput]) -> int:
    """Text size, for choosing where to prepare; an image always goes to the pool (decoding is slow)."""
    return sum(
        len(one)
        if isinstance(one, str)
        else len(one.data)
        if isinstance(one, ImageData)
        else len(one[0]) + len(one[1])
        for one in inputs
    )


class Engine:
    def __init__(self, catalog: Catalog, load: LoadSettings, limits: EngineLimits, metrics: Metrics) -> None:
        self.catalog = catalog
        self.device = load.device
        self._limits = limits
        self._metrics = metrics
        self._slots = {name: ModelSlot(catalog.get(name)) for name in catalog.names()}  # type: ignore[arg-type]
        self._workers: dict[str, ModelWorker] = {}
        self._loras: dict[str, Loras] = {}
        self._weights = load.weights
        self._residency = Residency()
        self._gauge = gauge_for(load.device, limits.memory_limit_bytes, self._loaded_bytes)
        self._watcher: asyncio.Task[None] | None = None
        self._tokenize_pool = ThreadPoolExecutor(limits.preprocessor_workers, thread_name_prefix="sie-tok")
        # Every load and forward runs on this one thread: see loader.load_and_warm_up for why.
        self._device_executor = ThreadPoolExecutor(1, thread_name_prefix="sie-device")
        self._busy_trim = heap.PeriodicTrim()  # runs on that one thread, for every model's batches
        self._loader = ModelLoader(
            load,
            self._start_worker,
            self._device_executor,
            self._make_room,
            lambda slot: self._evict_other(slot.entry.name, "out of memory loading"),
        )
        self._closed = False

    def start(self) -> None:
        """Background work that needs the running loop: the memory and idle watcher."""
        if self._watcher is None:
            self._watcher = asyncio.create_task(self._watch_memory(), name="sie-memory-watcher")

    async def preload(self, names: list[str]) -> None:
        """Load ``names`` one after another before serving; a failure is logged, not fatal."""
        for name in names:
            await self._loader.start_load(self._slot(name))

    def slots(self) -> list[ModelSlot]:
        return list(self._slots.values())

    def queue_depth(self, name: str) -> int:
        """Items queued or running on the model's worker; 0 when it has none (not loaded)."""
        worker = self._workers.get(name)
        return worker.pending_items if worker is not None else 0

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
        max_tokens = slot.entry.profile.max_batch_tokens
        limits = BatchLimits(
            max_tokens=max_tokens,
            max_items=self._limits.max_batch_items,
            max_wait_s=self._limits.max_batch_wait_ms / 1000,
        )
        runner = ModelRunner(model.adapter, max_tokens, model.fixed_dense)
        worker = ModelWorker(
            name,
            runner,
            limits,
            self._device_executor,
            self._limits.max_pending_items,
            on_batch=lambda stats: self._record_batch(name, stats),
            on_idle=heap.return_free_memory,
            after_batch=self._busy_trim,
            on_oom=lambda: self._evict_other(name, "out of memory in a batch of"),
            run_split=runner.run_split,
        )
        worker.start()
        self._workers[name] = worker
        self._residency.loaded(name)
        if isinstance(model.adapter, TakesLora):
            loras = Loras(
                name,
                model.adapter,
                self._limits.max_loras_per_model,
                partial(self._locate_lora, slot.entry),
                self._device_executor,
            )
            self._loras[name] = loras
            profile_lora = slot.entry.profile.runtime.get("lora_id")
            if isinstance(profile_lora, str):
                loras.preload(profile_lora)
        self._metrics.model_loaded.labels(name, model.device).set(1)

    def _locate_lora(self, entry: CatalogEntry, lora_id: str) -> Path:
        """A LoRA's folder: a path (absolute, ``~``, or relative to the model's YAML), else an id
        looked up in the weight tiers like a model's ``hf_id``."""
        is_path = lora_id.startswith(("/", "./", "../", "~"))
        return self._weights.resolve(None if is_path else lora_id, lora_id, entry.config_dir)

    def _lora(self, name: str, model: LoadedModel, lora_id: object) -> AbstractContextManager[str | None]:
        """The request's LoRA held for its duration (``Loras.using``); None runs the base model."""
        if lora_id is None:
            return nullcontext(None)
        if not isinstance(lora_id, str) or not lora_id:
            raise InvalidInput("Option 'lora_id' must be a non-empty string")
        loras = self._loras.get(name)
        if loras is None:
            raise InvalidInput(
                f"Model '{name}' does not support LoRA adapters ({model.adapter.family} adapter)"
            )
        return loras.using(lora_id)

    @contextmanager
    def _using(self, name: str) -> Iterator[tuple[LoadedModel, ModelWorker]]:
        """The loaded model held for one request: it counts as used, and is not evicted under it."""
        model, worker = self.ready_model(name)
        self._residency.hold(name)
        try:
            yield model, worker
        finally:
            self._residency.release(name)

    def _loaded_names(self) -> list[str]:
        return [n for n, slot in self._slots.items() if slot.state is ModelState.LOADED]

    def _loaded_bytes(self) -> int:
        return sum(slot.model.memory_bytes for slot in self._slots.values() if slot.model is not None)

    def _busy(self, name: str) -> bool:
        worker = self._workers.get(name)
        return worker is not None and worker.pending_items > 0

    def _under_pressure(self) -> bool:
        return self._gauge.used_percent() > self._limits.memory_threshold_percent

    async def _make_room(self, slot: ModelSlot) -> None:
        """Before a load: evict least recently used idle models while the device is over the threshold."""
        while self._under_pressure():
            victims = self._residency.least_recent(self._loaded_names(), self._busy, {slot.entry.name})
            if not victims:
                return
            await self._unload(victims[0], f"memory pressure before loading {slot.entry.name}")

    async def _evict_other(self, name: str, why: str) -> bool:
        """Out of memory for ``name`` (loading it, or in its batch): evict the least recently used other
        idle model so it can try once more; False when there is none."""
        victims = self._residency.least_recent(self._loaded_names(), self._busy, {name})
        if not victims:
            return False
        await self._unload(victims[0], f"{why} {name}")
        return True

    async def _watch_memory(self) -> None:
        """Every ``memory_check_s``: under pressure, evict the least recently used idle model (never the
        only loaded one); with ``idle_evict_s``, unload one model idle that long (even the only one)."""
        idle_after = self._limits.idle_evict_s
        while True:
            await asyncio.sleep(self._limits.memory_check_s)
            try:
                loaded = self._loaded_names()
                if len(loaded) > 1 and self._under_pressure():
                    victims = self._residency.least_recent(loaded, self._busy)
                    if victims:
                        await self._unload(victims[0], f"{self._gauge.describe()} over the threshold")
                        continue
                if idle_after is not None:
                    idle = [
                        n
                        for n in self._residency.least_recent(self._loaded_names(), self._busy)
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
            await loop.run_in_executor(self._device_executor, model.adapter.close)
            await loop.run_in_executor(self._device_executor, heap.return_free_memory)
        finally:
            slot.model, slot.task, slot.state = None, None, ModelState.AVAILABLE
            self._residency.forget(name)
            self._metrics.model_loaded.labels(name, model.device).set(0)
        log.info("unloaded %s (%s; it held %.1f MB)", name, why, model.memory_bytes / 1e6)

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
        if slot.state is ModelState.UNLOADING:
            raise ModelLoading(name)  # evicted just now; the next request after it starts a load
        if slot.state is ModelState.FAILED and not self._loader.can_retry(slot):
            failure = slot.failure
            assert failure is not None
            raise ModelLoadFailed(
                name, failure.reason, failure.attempts, failure.permanent, failure.error_class.value
            )
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

    def resolve(self, name: str, options: dict[str, Any] | None) -> str:
        """The catalog id serving ``options.profile`` (a ``{sie_id}:{profile}`` variant) or ``name``."""
        self._slot(name)
        profile = (options or {}).get("profile")
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

    async def _infer(
        self, name: str, model: LoadedModel, worker: ModelWorker, inputs: list[ModelInput], group: BatchGroup
    ) -> Inference:
        """The one submit path: prepare (on the loop when tiny, else on the CPU pool), queue, await."""
        adapter = model.adapter
        started = time.perf_counter()
        try:
            if _input_chars(inputs) <= INLINE_TOKENIZE_CHARS:
                prepared = adapter.prepare(inputs, group.forward)
            else:
                loop = asyncio.get_running_loop()
                prepared = await loop.run_in_executor(
                    self._tokenize_pool, adapter.prepare, inputs, group.forward
                )
        except UnsupportedInput as exc:
            raise InvalidInput(str(exc)) from exc
        tokenization_ms = (time.perf_counter() - started) * 1000
        futures = worker.submit(prepared, group)
        self._metrics.queue_depth.labels(name).set(worker.pending_items)
        try:
            results: list[ItemResult] = await asyncio.gather(*futures)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        return Inference(results, tokenization_ms, sum(item.cost for item in prepared))

    @staticmethod
    def _check_outputs(name: str, model: LoadedModel, needed: frozenset[Capability]) -> None:
        missing = needed - model.adapter.capabilities
        if missing:
            have = sorted(c.value for c in model.adapter.capabilities)
            raise InvalidInput(
                f"Model '{name}' does not support output types: {sorted(c.value for c in missing)}. "
                f"Supported: {have}"
            )

    async def encode(self, name: str, items: list[Item], params: EncodeParams | None) -> EncodeOutcome:
        started = time.perf_counter()
        require_items(items)
        name = self.resolve(name, params.options if params else None)
        plan = self.plan(name, params)
        with self._using(name) as (model, worker):
            keep = frozenset(Capability(t.value) for t in plan.output_types)
            if Capability.SPARSE in keep and plan.output_dtype not in SPARSE_DTYPES:
                raise InvalidInput(
                    f"Sparse output takes output_dtype float32 or float16, not '{plan.output_dtype.value}'"
                )
            computed = keep - {Capability.DENSE} | {Capability.MULTIVECTOR} if plan.muvera else keep
            self._check_outputs(name, model, computed)
            if plan.muvera and model.fixed_dense is None:
                raise InvalidInput(f"Model '{name}' has no MUVERA configuration")
            texts: list[ModelInput] = [plan.input_for(item, name, model.adapter) for item in items]
            with self._lora(name, model, plan.lora) as lora:
                group = BatchGroup(
                    Forward(computed, plan.pooling, plan.is_query, lora=lora),
                    Postprocess(keep, plan.normalize, plan.output_dtype, plan.muvera),
                )
                inference = await self._infer(name, model, worker, texts, group)
            dims = dict(model.adapter.dims)
            if plan.muvera and model.fixed_dims is not None:
                dims[Capability.DENSE] = model.fixed_dims
            encoded = [
                encode_result(item.id, result.outputs, plan.output_dtype, dims)
                for item, result in zip(items, inference.results, strict=True)
            ]
            timing = inference.timing(started, postprocessed=plan.output_dtype is not OutputDType.FLOAT32)
            return EncodeOutcome(name, encoded, timing, inference.tokens)

    async def score(
        self,
        name: str,
        query: Item,
        items: list[Item],
        options: dict[str, Any] | None,
        instruction: str | None = None,
    ) -> ScoreOutcome:
        """Rank ``items`` against ``query``: a cross-encoder scores each pair, an embedding model the
        similarity of its query and document embeddings (``engine.score_plan``), each text prepared
        as an encode request would prepare it (the profile's templates and instruction, ``is_query``
        for the query)."""
        started = time.perf_counter()
        require_items(items)
        name = self.resolve(name, options)
        entry = self.entry(name)
        runtime = {**entry.profile.runtime, **(options or {})}
        plan = plan_score(name, entry.config.tasks.score is not None, entry.config.output_types(), runtime)
        with self._using(name) as (model, worker):
            texts = [item.text for item in [query, *items]]
            if any(text is None for text in texts):
                raise InvalidInput("Score requires text on the query and on every item")
            with self._lora(name, model, runtime.get("lora_id")) as lora:
                query_text, documents = str(query.text), [str(item.text) for item in items]
                if plan.pairs:
                    self._check_outputs(name, model, frozenset({Capability.SCORE}))
                    group = BatchGroup(
                        Forward(frozenset({Capability.SCORE}), lora=lora), Postprocess(frozenset())
                    )
                    pairs: list[ModelInput] = [(query_text, doc) for doc in documents]
                    inference = await self._infer(name, model, worker, pairs, group)
                    scores = np.array([r.outputs.score for r in inference.results], dtype=np.float32)
                    timing, tokens = inference.timing(started, postprocessed=False), inference.tokens
                else:
                    assert plan.weights is not None
                    types = [OutputType(c.value) for c in plan.weights]
                    query_plan, doc_plan = (
                        plan_encode(
                            name,
                            entry.config.output_types(),
                            entry.profile.runtime,
                            EncodeParams(
                                types,
                                instruction=instruction,
                                options={**(options or {}), "is_query": is_query},
                            ),
                        )
                        for is_query in (True, False)
                    )
                    adapter = model.adapter
                    encoded = [
                        query_plan.text_for(query, adapter),
                        *(doc_plan.text_for(item, adapter) for item in items),
                    ]
                    scores, timing, tokens = await self._similarity(
                        name, model, worker, plan, encoded[0], encoded[1:], lora
                    )
            ids = [item_id(item.id, i) for i, item in enumerate(items)]
            return ScoreOutcome(name, ranked(ids, scores), timing, tokens)

    async def extract(self, name: str, items: list[Item], params: ExtractParams | None) -> ExtractOutcome:
        """Entities, classes and the like from each item: the adapter gets the labels, the instruction and
        the runtime options (profile's, overlaid by the request's) as one ``Task``, and items batch
        together only with items of an equal task."""
        started = time.perf_counter()
        require_items(items)
        params = params or ExtractParams()
        name = self.resolve(name, params.options)
        entry = self.entry(name)
        if entry.config.tasks.extract is None:
            raise InvalidInput(f"Model '{name}' {EXTRACT_HINT}")
        options = {**entry.profile.runtime, **(params.options or {})}
        with self._using(name) as (model, worker):
            self._check_outputs(name, model, frozenset({Capability.EXTRACT}))
            instruction = params.instruction or options.get("instruction")
            task = Task.of(
                params.labels or (),
                {k: v for k, v in options.items() if k not in ENGINE_OPTIONS},
                instruction if isinstance(instruction, str) else None,
            )
            extract = frozenset({Capability.EXTRACT})
            adapter = model.adapter
            inputs: list[ModelInput] = [
                image_of(item, name, adapter) or text_of(item, adapter) for item in items
            ]
            with self._lora(name, model, options.get("lora_id")) as lora:
                group = BatchGroup(Forward(extract, task=task, lora=lora), Postprocess(extract))
                inference = await self._infer(name, model, worker, inputs, group)
            results = [
                extract_result(item_id(item.id, i), result.outputs.extraction)
                for i, (item, result) in enumerate(zip(items, inference.results, strict=True))
            ]
            return ExtractOutcome(
                name, results, inference.timing(started, postprocessed=False), inference.tokens
            )

    async def _similarity(
        self,
        name: str,
        model: LoadedModel,
        worker: ModelWorker,
        plan: ScorePlan,
        query: str,
        documents: list[str],
        lora: str | None,
    ) -> tuple[np.ndarray, Timing, int]:
        assert plan.weights is not None
        outputs = frozenset(plan.weights)
        self._check_outputs(name, model, outputs)
        started = time.perf_counter()

        def group(is_query: bool) -> BatchGroup:
            return BatchGroup(Forward(outputs, is_query=is_query, lora=lora), Postprocess(outputs))

        asked, answered = await asyncio.gather(
            self._infer(name, model, worker, [query], group(True)),
            self._infer(name, model, worker, list[ModelInput](documents), group(False)),
        )
        q = asked.results[0].outputs
        docs = [r.outputs for r in answered.results]
        total = np.zeros(len(documents), dtype=np.float32)
        for capability, weight in plan.weights.items():
            if capability is Capability.DENSE:
                assert q.dense is not None
                part = cosine(q.dense, np.stack([d.dense for d in docs if d.dense is not None]))
            elif capability is Capability.SPARSE:
                assert q.sparse is not None
                part = sparse_dot(q.sparse, [d.sparse for d in docs if d.sparse is not None])
            else:
                assert q.multivector is not None
                part = maxsim(q.multivector, [d.multivector for d in docs if d.multivector is not None])
            total += weight * part
        tokens = asked.tokens + answered.tokens
        both = Inference(
            asked.results + answered.results, asked.tokenization_ms + answered.tokenization_ms, tokens
        )
        return total, both.timing(started, postprocessed=False), tokens

    async def detokenize(self, name: str, token_lists: list[list[int]]) -> list[str]:
        """Text for token-id inputs (OpenAI clients may send ids); ids outside the vocabulary are invalid."""
        await self.wait_loaded(name)
        model, _ = self.ready_model(name)
        tokenizer = model.adapter.tokenizer
        vocab = tokenizer.vocab_size
        for ids in token_lists:
            bad = next((i for i in ids if not 0 <= i < vocab), None)
            if bad is not None:
                raise InvalidInput(
                    f"Token id {bad} is outside the vocabulary of model '{name}' (size {vocab})"
                )
        return [tokenizer.decode(ids) for ids in token_lists]

    async def apply_catalog(self, catalog: Catalog, drain_s: float = 30.0) -> None:
        """Serve ``catalog`` from now on (hot reload): new ids become loadable; a changed id finishes its
        requests in flight on the old config, is unloaded, and loads again with the new one if it was
        loaded (its failure record cleared); a deleted id finishes its requests, is unloaded and gone."""
        old = self.catalog
        added = [n for n in catalog.names() if n not in old]
        removed = [n for n in old.names() if n not in catalog]
        changed = [n for n in catalog.names() if n in old and catalog.get(n) != old.get(n)]
        self.catalog = catalog
        for name in added:
            self._slots[name] = ModelSlot(catalog.get(name))  # type: ignore[arg-type]
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
            self._slots[name] = ModelSlot(catalog.get(name))  # type: ignore[arg-type]
            if was_loaded:
                self._loader.start_load(self._slots[name])
        if added or removed or changed:
            log.info("models dir reloaded: added %s, changed %s, removed %s", added, changed, removed)

    async def _drain(self, name: str, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until no request holds the model and nothing is queued for it."""
        deadline = time.monotonic() + timeout_s
        while (self._residency.is_held(name) or self._busy(name)) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        """Stop intake, fail queued work, unload models, stop the pools; the event loop only awaits.

        Models are closed on the device thread, where they were loaded and ran (freeing device memory
        and collecting their objects takes a while), and the pools are joined off the loop."""
        self._closed = True
        if self._watcher is not None:
            self._watcher.cancel()
        for loras in self._loras.values():
            loras.close()
        await asyncio.gather(*(w.close() for w in self._workers.values()))
        loop = asyncio.get_running_loop()
        for slot in self._slots.values():
            if slot.task is not None and not slot.task.done():
                slot.task.cancel()
            if slot.model is not None:
                adapter, slot.model = slot.model.adapter, None
                await loop.run_in_executor(self._device_executor, adapter.close)
        self._tokenize_pool.shutdown(wait=False, cancel_futures=True)
        await asyncio.to_thread(self._device_executor.shutdown, wait=True, cancel_futures=True)
