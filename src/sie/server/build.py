"""Settings in, a ready ``Engine`` out: the composition both front ends share (HTTP today, the queue
worker later), so neither has to know how devices, weights and limits are wired together."""

from __future__ import annotations

from sie.adapters.runtime.device import detect_device
from sie.catalog.bundles import load_bundle
from sie.catalog.catalog import Catalog
from sie.catalog.source import models_directory
from sie.engine.engine import Engine, EngineLimits
from sie.engine.loader import LoadSettings, ModelState
from sie.observability.metrics import Metrics
from sie.settings.server import Settings
from sie.weights.sources import WeightSources


def build_catalog(settings: Settings) -> tuple[Catalog, list[str]]:
    """The servable models and the ones to preload; a bad YAML, an unknown bundle, a ``--models`` id
    outside the bundle or an unknown preload id stops startup."""
    only = settings.filter_list()
    catalog = Catalog.from_directory(models_directory(settings.models_dir), only or None)
    if settings.bundle:
        bundle = load_bundle(settings.bundle, settings.bundles_dir)
        selected = bundle.select(catalog)
        outside = [name for name in catalog.names() if name not in selected]
        if only and outside:
            raise ValueError(f"--models names model(s) outside bundle '{bundle.name}': {', '.join(outside)}")
        catalog = selected
    preload = settings.preload_list()
    unknown = [name for name in preload if name not in catalog]
    if unknown:
        raise ValueError(f"--preload names model(s) not being served: {', '.join(unknown)}")
    return catalog, preload


def build_engine(settings: Settings, catalog: Catalog, metrics: Metrics) -> Engine:
    device = detect_device(settings.device)
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
        max_loras_per_model=settings.max_loras_per_model,
        memory_threshold_percent=settings.memory_pressure_threshold_percent,
        idle_evict_s=settings.idle_evict_s,
        memory_limit_bytes=settings.memory_limit_bytes,
        request=settings.request_limits(),
        images=settings.image_limits(),
        pipeline_depth=settings.rust_pipeline_depth,
        oom_recovery=settings.oom_plan(),
    )
    engines.append(Engine(catalog, load, limits, metrics))
    return engines[0]
