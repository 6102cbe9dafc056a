"""The composition root of ``sie-config``: settings in, an ASGI app out.

Start: bundles and the baked catalogue (a bad YAML stops startup) → the store (its epoch, and with
``SIE_CONFIG_RESTORE=true`` its models back into the registry) → serve, while NATS is joined in the
background (writes answer 503 ``nats_unavailable`` until it is, reads and probes answer at once).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sie import __version__
from sie.control import api
from sie.control.publisher import DeltaPublisher
from sie.control.registry import ConfigRegistry
from sie.control.settings import ConfigServiceSettings
from sie.control.state import ControlState
from sie.control.store import ConfigStore
from sie.engine.bundles import bundle_names, load_bundle

log = logging.getLogger(__name__)


def build_state(settings: ConfigServiceSettings) -> ControlState:
    bundles = [load_bundle(name, settings.bundles_dir) for name in bundle_names(settings.bundles_dir)]
    registry = ConfigRegistry(bundles, settings.models_dir)
    store = ConfigStore(settings.config_store_dir) if settings.config_store_dir else None
    epoch = 0
    if store is not None:
        epoch = store.read_epoch()
        if settings.config_restore:
            bad = registry.restore(store.load_all())
            for model_id in bad:
                log.error("stored config of %s does not parse; left out", model_id)
            log.info("restored %d models from %s", len(registry.api_ids), store.location)
    publisher = DeltaPublisher(settings.nats_servers()) if settings.nats_servers() else None
    state = ControlState(settings, registry, store, publisher, epoch)
    state.refresh_gauges()
    return state


def create_app(settings: ConfigServiceSettings) -> FastAPI:
    state = build_state(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if state.publisher is not None:
            state.publisher.start()
        else:
            log.info("SIE_NATS_URL not set: configs are stored but no deltas are published")
        try:
            yield
        finally:
            if state.publisher is not None:
                await state.publisher.stop()

    app = FastAPI(
        title="sie-config",
        description="The cluster's config control plane.",
        version=__version__,
        lifespan=lifespan,
    )
    app.state.control = state
    app.include_router(api.router)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> dict[str, str]:
        return {"status": "ready"}

    @app.get("/metrics")
    async def metrics() -> Response:
        state.metrics.nats_connected.set(
            1 if state.publisher is not None and state.publisher.connected else 0
        )
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        status = 500
        try:
            response = await call_next(request)
            status = response.status_code
            return response
        finally:
            # The route template, not the path: per-model reads must not mint a series each.
            template = getattr(request.scope.get("route"), "path", "other")
            state.metrics.requests.labels(request.method, template, str(status)).inc()

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return JSONResponse({"detail": {"error": "internal_error", "message": str(exc)}}, status_code=500)

    log.info(
        "sie-config %s: %d bundles, %d models (%d from the store), epoch %d",
        __version__,
        len(state.registry.bundles),
        len(state.registry.ids()),
        len(state.registry.api_ids),
        state.epoch,
    )
    return app
