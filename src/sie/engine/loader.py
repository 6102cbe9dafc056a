"""Turning a catalog entry into a running model: weights, tokenizer, adapter and its worker.

Loads run one at a time on their own thread, so a slow load never stalls inference of other models.
A failed load is remembered (``last_error``) and answered as ``MODEL_LOAD_FAILED`` until its cooldown
ends; failures that cannot heal by themselves (missing weights, bad adapter) are permanent until the
server restarts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum

from sie.adapters.base import DenseEncoder, LoadSpec, TokenBatch
from sie.adapters.device import effective_precision
from sie.adapters.registry import UnknownAdapter, adapter_class
from sie.adapters.tokenizer import TextTokenizer
from sie.engine.catalog import CatalogEntry
from sie.engine.model_config import ComputePrecision
from sie.engine.weights import WeightsNotFound, WeightSources

log = logging.getLogger(__name__)

_COOLDOWN_S = {MemoryError: 60.0, OSError: 30.0}


class ModelState(StrEnum):
    AVAILABLE = "available"
    LOADING = "loading"
    LOADED = "loaded"
    UNLOADING = "unloading"
    FAILED = "failed"


@dataclass(frozen=True)
class LoadFailure:
    reason: str
    attempts: int
    permanent: bool
    retry_at: float


@dataclass(frozen=True)
class LoadedModel:
    tokenizer: TextTokenizer
    encoder: DenseEncoder
    adapter_name: str
    device: str


@dataclass(frozen=True)
class LoadSettings:
    device: str
    default_precision: ComputePrecision
    threads: int | None
    weights: WeightSources


@dataclass
class ModelSlot:
    entry: CatalogEntry
    state: ModelState = ModelState.AVAILABLE
    model: LoadedModel | None = None
    failure: LoadFailure | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)


def load_model(entry: CatalogEntry, settings: LoadSettings) -> LoadedModel:
    """Blocking: resolve weights, build tokenizer and adapter. Runs on the load thread."""
    config, profile = entry.config, entry.profile
    folder = settings.weights.resolve(config.hf_id, config.weights_path, entry.config_dir, config.hf_revision)
    loadtime = dict(profile.loadtime)
    tokenizer_id = loadtime.pop("tokenizer_id", None)
    tokenizer_folder = settings.weights.resolve(tokenizer_id, None) if tokenizer_id else folder
    precision = effective_precision(profile.compute_precision or settings.default_precision, settings.device)
    spec = LoadSpec(
        weights=folder,
        device=settings.device,
        precision=precision,
        max_seq_length=config.max_sequence_length,
        loadtime=loadtime,
        threads=settings.threads,
        tokenizer_weights=tokenizer_folder,
    )
    cls = adapter_class(profile.adapter_path)
    encoder = cls.load(spec)
    tokenizer = TextTokenizer.from_folder(tokenizer_folder, config.max_sequence_length)
    # One tiny forward so lazy initialisation (kernels, allocator, graph) is not paid by the first user.
    encoder.embed(TokenBatch.pad(tokenizer.encode(["warm up"]), tokenizer.pad_id), encoder.default_pooling)
    log.info("loaded %s from %s on %s (%s)", entry.name, folder, settings.device, precision.value)
    return LoadedModel(tokenizer, encoder, cls.__name__, settings.device)


class ModelLoader:
    """Owns every model's state; ``ensure`` starts a background load and never blocks the caller."""

    def __init__(
        self,
        settings: LoadSettings,
        on_loaded: Callable[[ModelSlot], None],
        executor: Executor | None = None,
    ) -> None:
        self._settings = settings
        self._on_loaded = on_loaded
        self._executor = executor or ThreadPoolExecutor(1, thread_name_prefix="sie-load")
        self._lock = asyncio.Lock()

    def start_load(self, slot: ModelSlot) -> asyncio.Task[None]:
        if slot.task is None or slot.task.done():
            slot.state = ModelState.LOADING
            slot.task = asyncio.create_task(self._load(slot), name=f"load:{slot.entry.name}")
        return slot.task

    def can_retry(self, slot: ModelSlot) -> bool:
        failure = slot.failure
        return failure is None or (not failure.permanent and time.monotonic() >= failure.retry_at)

    async def _load(self, slot: ModelSlot) -> None:
        async with self._lock:
            loop = asyncio.get_running_loop()
            try:
                slot.model = await loop.run_in_executor(
                    self._executor, load_model, slot.entry, self._settings
                )
            except Exception as exc:
                self._record_failure(slot, exc)
                return
            slot.failure = None
            slot.state = ModelState.LOADED
            self._on_loaded(slot)

    def _record_failure(self, slot: ModelSlot, exc: Exception) -> None:
        log.error("loading %s failed: %s", slot.entry.name, exc, exc_info=exc)
        cooldown = next((s for t, s in _COOLDOWN_S.items() if isinstance(exc, t)), None)
        permanent = cooldown is None or isinstance(exc, WeightsNotFound | UnknownAdapter)
        attempts = (slot.failure.attempts if slot.failure else 0) + 1
        reason = f"{type(exc).__name__}: {exc}"
        slot.failure = LoadFailure(reason, attempts, permanent, time.monotonic() + (cooldown or 0.0))
        slot.state = ModelState.FAILED
        slot.model = None

    def close(self) -> None:
        if isinstance(self._executor, ThreadPoolExecutor):
            self._executor.shutdown(wait=False, cancel_futures=True)
