"""The composition root of the standalone server: settings in, a ready ASGI app out.

Start order: catalog (fails fast on a bad YAML) → metrics → engine → preload → serve. Shutdown:
mark not-ready → close the engine (fail queued work, unload models).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI

from sie import __version__
from sie.adapters.device import detect_device
from sie.engine.catalog import Catalog
from sie.engine.engine import Engine, EngineLimits
from sie.engine.loader import LoadSettings
from sie.engine.weights import WeightSources
from sie.observability.metrics import Metrics
from sie.server import openapi_docs
from sie.server.api import encode, health, models, openai_compat, score_extract
from sie.server.errors import HANDLED, handle_native_error
from sie.server.middleware import BodyLimit, IdentityHeaders, SdkVersionSkew
from sie.server.request_metrics import RequestMetrics
from sie.server.settings import Settings


@dataclass
class Lifecycle:
    draining: bool = False


def build_engine(settings: Settings, catalog: Catalog, metrics: Metrics) -> Engine:
    device = detect_device(settings.device)
    load = LoadSettings(
        device=device,
        default_precision=settings.default_compute_precision,
        threads=settings.threads(),
        weights=WeightSources(settings.local_cache, settings.hf_fallback),
        attention=settings.attention_backend,
    )
    limits = EngineLimits(
        max_batch_items=settings.max_batch_requests,
        max_batch_wait_ms=settings.max_batch_wait_ms,
        max_pending_items=settings.max_concurrent_requests,
        preprocessor_workers=settings.tokenizer_threads(device),
    )
    return Engine(catalog, load, limits, metrics)


def create_app(settings: Settings) -> FastAPI:
    # The tokenizer pool already runs tokenization beside the forward pass; the Rust tokenizer's own
    # per-call thread pool would add one thread per core on top and fight the forward for the cores.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    catalog = Catalog.from_directory(settings.models_dir, settings.filter_list() or None)
    preload = settings.preload_list()
    unknown = [name for name in preload if name not in catalog]
    if unknown:
        raise ValueError(f"--preload names model(s) not being served: {', '.join(unknown)}")
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[dict[str, Any]]:
        engine = build_engine(settings, catalog, metrics)
        lifecycle = Lifecycle()
        await engine.preload(preload)
        try:
            yield {
                "engine": engine,
                "metrics": metrics,
                "lifecycle": lifecycle,
                "max_item_text_bytes": settings.max_item_text_bytes,
            }
        finally:
            lifecycle.draining = True
            await engine.close()

    app = FastAPI(
        title="SIE Server",
        description="Inference engine for search workloads: encode, score, extract.",
        version=__version__,
        lifespan=lifespan,
    )
    inference = (*encode.ROUTES, *score_extract.ROUTES, *openai_compat.ROUTES)
    app.router.routes.extend(route.route() for route in inference)
    for router in (health.router, models.router):
        app.include_router(router)
    for exc_type in HANDLED:
        app.add_exception_handler(exc_type, handle_native_error)
    app.add_exception_handler(Exception, handle_native_error)  # the outermost catch-all: JSON 500
    # Added innermost first; a request meets them in the reverse order (identity headers outermost).
    app.add_middleware(SdkVersionSkew, server_version=__version__)
    app.add_middleware(BodyLimit, limit=settings.max_request_body_bytes)
    app.add_middleware(RequestMetrics, metrics=metrics)
    app.add_middleware(IdentityHeaders)
    openapi_docs.install(app, __version__, inference)
    return app
