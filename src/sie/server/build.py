"""Settings in, a ready ``Engine`` out: the composition both front ends share (HTTP today, the queue
worker later), so neither has to know how devices, weights and limits are wired together."""

from __future__ import annotations

import logging

from sie.adapters.runtime.device import resolve_device
from sie.catalog.bundles import Bundle, load_bundle
from sie.catalog.catalog import Catalog
from sie.catalog.source import models_directory
from sie.engine.engine import Engine, EngineLimits
from sie.engine.loader import LoadSettings, ModelState
from sie.observability.metrics import Metrics
from sie.settings.server import Settings
from sie.weights.sources import WeightSources

log = logging.getLogger(__name__)


def build_catalog(settings: Settings) -> tuple[Catalog, list[str]]:
    """The servable models and the ones to load at start (preloaded, then pinned); a bad YAML, an
    unknown bundle, a ``--models`` id outside the bundle, an ``SIE_EXTRA_MODELS`` id not in the models
    dir, or a preload id (or, with a selection, a pinned id) not served stops startup."""
    only = settings.filter_list()
    directory = models_directory(settings.models_dir)
    catalog = Catalog.from_directory(directory, only or None)
    if settings.bundle:
        bundle = load_bundle(settings.bundle, settings.bundles_dir)
        selected = bundle.select(catalog)
        outside = [name for name in catalog.names() if name not in selected]
        if only and outside:
            raise ValueError(f"--models names model(s) outside bundle '{bundle.name}': {', '.join(outside)}")
        catalog = selected
    extras = settings.extra_list()
    if extras:
        everything = Catalog.from_directory(directory)
        unknown = [name for name in extras if name not in everything]
        if unknown:
            raise ValueError(f"SIE_EXTRA_MODELS names model(s) not in the models dir: {', '.join(unknown)}")
        catalog = with_extras(catalog, everything, extras)
        log.info("SIE_EXTRA_MODELS: also serving %s", ", ".join(extras))
    preload = settings.preload_list()
    unknown = [name for name in preload if name not in catalog]
    if unknown:
        raise ValueError(f"--preload names model(s) not being served: {', '.join(unknown)}")
    pinned = settings.pinned_list()
    absent = [name for name in pinned if name not in catalog]
    if absent and (only or settings.bundle):
        raise ValueError(f"SIE_PINNED_MODELS names model(s) not being served: {', '.join(absent)}")
    if absent:  # sie-config or a hot reload may bring them: they load when their config arrives
        log.warning("SIE_PINNED_MODELS: %s not in the catalogue yet; pinned once served", ", ".join(absent))
    if pinned:
        log.info("SIE_PINNED_MODELS: %s loaded at start and never evicted", ", ".join(pinned))
    return catalog, list(dict.fromkeys(preload + [name for name in pinned if name in catalog]))


def with_extras(selected: Catalog, everything: Catalog, extras: list[str]) -> Catalog:
    """``selected`` plus the ``SIE_EXTRA_MODELS`` ids ``everything`` holds that it lacks."""
    added = [everything[name] for name in extras if name in everything and name not in selected]
    return Catalog(selected.entries() + added) if added else selected


def select(catalog: Catalog, bundle: Bundle | None, extras: list[str]) -> Catalog:
    """What a reloaded catalogue serves: the bundle's models, and the extra ids it holds."""
    return with_extras(bundle.select(catalog) if bundle else catalog, catalog, extras)


def build_device(settings: Settings) -> str:
    """``SIE_DEVICE`` with ``SIE_DEVICES`` (``resolve_device``): a device that does not exist, or
    several, stop startup."""
    return resolve_device(settings.device, settings.device_list())


def build_engine(settings: Settings, catalog: Catalog, metrics: Metrics, device: str) -> Engine:
    engines: list[Engine] = []  # the engine is built after its weight sources, which ask it what is loaded

    def in_use() -> set[str]:
        busy = (ModelState.LOADED, ModelState.LOADING)
        return {
            s.entry.config.hf_id
            for e in engines
            for s in e.slots()
            if s.state in busy and s.entry.config.hf_id
        }

    weights = WeightSources(
        local_cache=settings.local_cache,
        hf_fallback=settings.hf_fallback,
        cluster_cache=settings.cluster_cache,
        disk_cache_enabled=settings.disk_cache_enabled,
        disk_pressure_threshold_percent=settings.disk_pressure_threshold_percent,
        in_use=in_use,
    )
    load = LoadSettings(
        device=device,
        default_precision=settings.default_compute_precision,
        threads=settings.threads(),
        weights=weights,
        attention=settings.attention_backend,
        loras=settings.lora_settings(),
    )
    limits = EngineLimits(
        max_batch_items=settings.batch_items(),
        max_batch_wait_ms=settings.batch_wait_ms(),
        max_pending_items=settings.max_concurrent_requests,
        preprocessor_workers=settings.tokenizer_threads(device),
        image_workers=settings.image_threads(device),
        instrumentation=settings.instrumentation,
        pinned=frozenset(settings.pinned_list()),
        max_loras_per_model=settings.max_loras_per_model,
        memory_threshold_percent=settings.memory_pressure_threshold_percent,
        idle_evict_s=settings.idle_evict_s,
        memory_limit_bytes=settings.memory_limit_bytes,
        request=settings.request_limits(),
        images=settings.image_limits(),
        pipeline_depth=settings.rust_pipeline_depth,
        oom_recovery=settings.oom_plan(),
    )
    log.info(
        "device %s; %d tokenization and %d image threads (SIE_PREPROCESSOR_WORKERS, SIE_IMAGE_WORKERS)%s",
        device,
        limits.preprocessor_workers,
        limits.image_workers,
        "; per-batch statistics logged (SIE_INSTRUMENTATION)" if limits.instrumentation else "",
    )
    engines.append(Engine(catalog, load, limits, metrics))
    return engines[0]
