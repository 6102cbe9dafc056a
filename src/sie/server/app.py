"""The composition root of the standalone server: settings in, a ready ASGI app out.

Start order: catalog (fails fast on a bad YAML) → metrics → engine → preload → serve. Shutdown:
mark not-ready → close the engine (fail queued work, unload models).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from sie import __version__
from sie.engine.build import build_catalog, build_engine
from sie.engine.hot_reload import watch_models_dir
from sie.engine.remote_fs import is_remote
from sie.observability.metrics import Metrics
from sie.server import openapi_docs
from sie.server.api import encode, health, models, openai_compat, rerank, score_extract
from sie.server.errors import HANDLED, handle_native_error
from sie.server.middleware import BodyLimit, IdentityHeaders, SdkVersionSkew
from sie.server.request_metrics import RequestMetrics
from sie.settings import Settings


@dataclass
class Lifecycle:
    draining: bool = False


def create_app(settings: Settings) -> FastAPI:
    # The tokenizer pool already runs tokenization beside the forward pass; the Rust tokenizer's own
    # per-call thread pool would add one thread per core on top and fight the forward for the cores.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    catalog, preload = build_catalog(settings)
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[dict[str, Any]]:
        engine = build_engine(settings, catalog, metrics)
        lifecycle = Lifecycle()
        engine.start()
        await engine.preload(preload)
        local_dir = None if is_remote(settings.models_dir) else Path(settings.models_dir).expanduser()
        reload_task = (
            asyncio.create_task(
                watch_models_dir(local_dir, settings.filter_list() or None, engine.apply_catalog)
            )
            if settings.hot_reload and local_dir is not None and local_dir.is_dir()
            else None
        )
        try:
            yield {
                "engine": engine,
                "metrics": metrics,
                "lifecycle": lifecycle,
                "max_item_text_bytes": settings.max_item_text_bytes,
            }
        finally:
            lifecycle.draining = True
            if reload_task is not None:
                reload_task.cancel()
            await engine.close()

    app = FastAPI(
        title="SIE Server",
        description="Inference engine for search workloads: encode, score, extract.",
        version=__version__,
        lifespan=lifespan,
    )
    inference = (*encode.ROUTES, *score_extract.ROUTES, *openai_compat.ROUTES, *rerank.ROUTES)
    app.router.routes.extend(route.route() for route in inference)
    for router in (health.router, models.router):
        app.include_router(router)
    for exc_type in HANDLED:
        app.add_exception_handler(exc_type, handle_native_error)
    app.add_exception_handler(Exception, handle_native_error)  # the outermost catch-all: JSON 500
    # Added innermost first; a request meets them in the reverse order (identity headers outermost).
    app.add_middleware(SdkVersionSkew, server_version=__version__)
    openai_routes = [route.route() for route in inference if route.openai_errors]
    app.add_middleware(BodyLimit, limit=settings.max_request_body_bytes, openai_routes=openai_routes)
    app.add_middleware(RequestMetrics, metrics=metrics)
    app.add_middleware(IdentityHeaders)
    example = preload[0] if preload else next(iter(catalog.names()), None)
    openapi_docs.install(app, __version__, inference, models.STRUCTS, example)
    return app
