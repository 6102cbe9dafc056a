"""Turning a catalog entry into a running model: weights, tokenizer, adapter and its worker.

Loads run one at a time on the device executor, the same thread as every forward (see
``load_and_warm_up``), so a load pauses inference on that device while it runs.
A failed load is remembered (``last_error``) and answered as ``MODEL_LOAD_FAILED`` until its cooldown
ends, telling its class and a generic text (the exception is logged); ``load_errors`` classifies it
and decides whether it is permanent (until the config changes or the server restarts) and how long
the cooldown of a transient one is. A load that found the local disk full (``DiskFull``) may be tried
again before its cooldown ends, as soon as the disk has the room it lacked.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from sie.adapters.batch import AnnotatedText, ModelInput
from sie.adapters.contract import Adapter, Forward, LoadSpec, SchedulesItsOwn, Trait, output_dims
from sie.adapters.loading import adapter_class
from sie.adapters.runtime.device import effective_precision
from sie.adapters.runtime.images import sample_image
from sie.catalog.catalog import CatalogEntry
from sie.core import heap
from sie.core.options import AttentionBackend, Capability, ComputePrecision, Modality
from sie.core.task import Task
from sie.engine.load_errors import LoadErrorClass, classify, remedy_of, room_of, told
from sie.engine.memory import model_bytes
from sie.postprocess.muvera import MuveraStage
from sie.weights.errors import has_room
from sie.weights.lora_sources import LoraSettings
from sie.weights.sources import WeightSources

log = logging.getLogger(__name__)


class ModelState(StrEnum):
    AVAILABLE = "available"
    LOADING = "loading"
    LOADED = "loaded"
    UNLOADING = "unloading"
    FAILED = "failed"


@dataclass(frozen=True)
class LoadFailure:
    reason: str  # what a client is told (``load_errors.told``); the exception went to the log
    attempts: int
    permanent: bool
    retry_at: float
    error_class: LoadErrorClass = LoadErrorClass.UNKNOWN
    room: tuple[Path, int] | None = None  # a full disk: its folder and the bytes the load needed


@dataclass(frozen=True)
class LoadedModel:
    adapter: Adapter
    adapter_name: str
    device: str
    muvera: MuveraStage | None = None  # for a model with a multivector output
    memory_bytes: int = 0  # what its weights hold on the device (``memory.model_bytes``)

    def dims(self, muvera: bool) -> Mapping[Capability, int]:
        """The widths of its encode outputs, the dense one MUVERA's when the request asks for that."""
        dims = output_dims(self.adapter)
        if muvera and self.muvera is not None:
            return {**dims, self.muvera.PRODUCES: self.muvera.dims}
        return dims


@dataclass(frozen=True)
class LoadSettings:
    device: str
    default_precision: ComputePrecision
    threads: int | None
    weights: WeightSources
    attention: AttentionBackend = AttentionBackend.AUTO
    loras: LoraSettings = field(default_factory=LoraSettings)


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
    cls = adapter_class(profile.adapter_path, entry.config_dir)
    folder = settings.weights.resolve(
        config.hf_id,
        config.weights_path,
        entry.config_dir,
        config.hf_revision,
        onnx=Trait.RUNS_ONNX in cls.traits,
    )
    loadtime = dict(profile.loadtime)
    if profile.kv_budget_tokens:  # a generative model's paged cache (``adapters.generation``)
        loadtime.setdefault("kv_budget_tokens", profile.kv_budget_tokens)
        loadtime.setdefault("max_batch_tokens", profile.max_batch_tokens)
    tokenizer_id = loadtime.pop("tokenizer_id", None)
    tokenizer_folder = settings.weights.resolve(tokenizer_id, None) if tokenizer_id else folder
    precision = effective_precision(profile.compute_precision or settings.default_precision, settings.device)
    spec = LoadSpec(
        weights=folder,
        device=settings.device,
        precision=precision,
        max_seq_length=entry.max_sequence_length,
        loadtime=loadtime,
        threads=settings.threads,
        tokenizer_weights=tokenizer_folder,
        attention=settings.attention,
        fetch=lambda hf_id, revision, path: settings.weights.resolve(hf_id, path, entry.config_dir, revision),
    )
    adapter: Adapter = cls.load(spec)
    held = model_bytes(adapter, folder)
    log.info(
        "loaded %s from %s on %s (%s, %.1f MB)",
        entry.name,
        folder,
        settings.device,
        precision.value,
        held / 1e6,
    )
    muvera = (
        MuveraStage.of(output_dims(adapter)[Capability.MULTIVECTOR], loadtime)
        if Capability.MULTIVECTOR in adapter.capabilities
        else None
    )
    return LoadedModel(adapter, cls.__name__, settings.device, muvera, held)


def warm_up(adapter: Adapter) -> None:
    """One tiny forward of the adapter's main output, so lazy initialisation is not paid by a user:
    its embeddings when it has any (of a text, and of an image too for a model that takes images),
    else its pair scores, else an extraction with one label (of an image for an image-only model, of
    a text naming two entities for a family that reads item metadata); a generative model generates
    one token."""
    if isinstance(adapter, SchedulesItsOwn):
        adapter.warm_up()
        return
    embeddings = adapter.capabilities - {Capability.SCORE, Capability.EXTRACT}
    inputs: list[ModelInput] = ["warm up"] if Modality.TEXT in adapter.inputs else [sample_image()]
    if embeddings:
        forward = Forward(embeddings)
        if Modality.IMAGE in adapter.inputs and Modality.TEXT in adapter.inputs:
            inputs.append(sample_image())
    elif Capability.SCORE in adapter.capabilities:
        forward, inputs = Forward(frozenset({Capability.SCORE})), [("warm", "up")]
    else:
        forward = Forward(frozenset({Capability.EXTRACT}), task=Task(labels=("thing",)))
        if Trait.READS_ITEM_METADATA in adapter.traits:  # GLiREL relates the entities an item names
            named = [{"text": "Ann", "start": 0, "end": 3}, {"text": "Bob", "start": 8, "end": 11}]
            inputs = [AnnotatedText("Ann met Bob", {"entities": named})]
    adapter.run(adapter.prepare(inputs, forward), forward)


def load_and_warm_up(entry: CatalogEntry, settings: LoadSettings) -> LoadedModel:
    """Load, then one tiny forward so lazy initialisation is not paid by a user.

    Runs on the device executor's thread, like every forward: OpenMP keeps one thread team per
    calling thread, and once two threads have run parallel torch work (a forward, or the weight casts
    of a load) their teams fight over the cores: a 10-word query took 13 ms instead of 5.5 ms on 2
    cores. The price is that a load pauses inference on that device for its duration.
    Ends by freezing the heap (``heap.freeze_loaded``), so collections no longer walk the model.
    """
    model = load_model(entry, settings)
    warm_up(model.adapter)
    heap.freeze_loaded()
    return model


def can_retry(failure: LoadFailure | None) -> bool:
    """Whether a model whose last load ended in ``failure`` may be loaded again now: its cooldown is
    over, or the disk it found full has the room now (one ``statvfs`` per ask)."""
    if failure is None:
        return True
    if failure.permanent:
        return False
    return time.monotonic() >= failure.retry_at or (failure.room is not None and has_room(*failure.room))


def failure_after(name: str, exc: Exception, previous: LoadFailure | None) -> LoadFailure:
    """What a failed load leaves behind: classified (``load_errors``), counted, with its cooldown."""
    attempts = (previous.attempts if previous else 0) + 1
    failure = classify(exc, attempts)
    log.error(
        "loading %s failed (%s, attempt %d, %s): %s",
        name,
        failure.error_class.value,
        attempts,
        "permanent" if failure.permanent else f"retry after {failure.cooldown_s:.0f} s",
        exc,
        exc_info=exc,
    )
    return LoadFailure(
        told(failure.error_class, remedy_of(exc)),
        attempts,
        failure.permanent,
        time.monotonic() + failure.cooldown_s,
        failure.error_class,
        room_of(exc),
    )


class ModelLoader:
    """Loads models one at a time on the device executor (see ``load_and_warm_up``). It writes no model
    state: the registry owns that, and asks this for a ``LoadedModel`` or the exception."""

    def __init__(
        self,
        settings: LoadSettings,
        device_executor: Executor,
        make_room: Callable[[CatalogEntry], Awaitable[None]],
        evict_one: Callable[[CatalogEntry], Awaitable[bool]],
    ) -> None:
        self._settings = settings
        self._device_executor = device_executor
        self._make_room = make_room
        self._evict_one = evict_one
        self._lock = asyncio.Lock()

    async def load(self, entry: CatalogEntry) -> LoadedModel:
        """Make room (evict under memory pressure), load; out of memory evicts one more and tries once
        more, as the public server does."""
        async with self._lock:
            loop = asyncio.get_running_loop()
            await self._make_room(entry)
            try:
                return await loop.run_in_executor(
                    self._device_executor, load_and_warm_up, entry, self._settings
                )
            except Exception as exc:
                oom = classify(exc, 1).error_class is LoadErrorClass.OOM
                if not (oom and await self._evict_one(entry)):
                    raise
                log.warning("out of memory loading %s; evicted a model, trying once more", entry.name)
                return await loop.run_in_executor(
                    self._device_executor, load_and_warm_up, entry, self._settings
                )
