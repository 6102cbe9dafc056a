"""The composition root of ``sie-config``: settings in, an ASGI app out.

Start: bundles and the baked catalogue (a bad YAML stops startup) → the store (its epoch, which must
read as an integer, and with ``SIE_CONFIG_RESTORE=true`` its models back into the registry) → serve,
while NATS is joined in the background (writes answer 503 ``nats_unavailable`` until it is, reads and
probes answer at once). Every body is refused past ``api.MAX_BODY_BYTES`` before it is read.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from sie import __version__
from sie.catalog.bundles import bundle_names, load_bundle
from sie.catalog.config_errors import BodyTooLarge
from sie.control import api
from sie.control.auth import Tokens, refuse_open, require_metrics
from sie.control.configs import ConfigRegistry
from sie.control.publisher import DeltaPublisher
from sie.control.state import ControlState
from sie.control.store import ConfigStore
from sie.errors import SieError
from sie.http import openapi
from sie.http.errors import Envelope
from sie.http.errors import install as install_errors
from sie.http.metrics import route_template, run_recording_status
from sie.http.middleware import BodyLimit
from sie.settings.common import Host, secret
from sie.settings.control import ConfigServiceSettings
from sie.wire.errors import ConfigErrorCode, ErrorCode

log = logging.getLogger(__name__)


def producer_id(host: Host) -> str:
    """``POD_NAME`` (unique per pod), else ``{hostname}-{pid}``: the id followers check against
    ``SIE_NATS_CONFIG_TRUSTED_PRODUCERS``."""
    return host.pod_name or f"{host.hostname or socket.gethostname()}-{os.getpid()}"


def build_state(settings: ConfigServiceSettings) -> ControlState:
    bundles = [load_bundle(name, settings.bundles_dir) for name in bundle_names(settings.bundles_dir)]
    registry = ConfigRegistry(bundles, Path(settings.models_dir))
    registry.upstream_names = settings.declared_upstreams()
    store = ConfigStore(settings.config_store_dir) if settings.config_store_dir else None
    epoch = 0
    if store is not None:
        epoch = store.read_epoch()
        if settings.config_restore:
            bad = registry.restore(store.load_all())
            for model_id in bad:
                log.error("stored config of %s does not parse; left out", model_id)
            log.info("restored %d models from %s", len(registry.api_ids), store.location)
    servers = settings.nats_servers()
    publisher = DeltaPublisher(settings.nats_access(), producer_id(Host())) if servers else None
    state = ControlState(tokens_of(settings), registry, store, publisher, epoch)
    state.refresh_gauges()
    return state


class RequestCounting:
    """``sie_config_http_requests`` per method, route template and status: the template, not the
    path, so per-model reads do not mint a series each."""

    def __init__(self, app: ASGIApp, state: ControlState, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.state = state
        self.routes = tuple(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        def record(status: int, _: float) -> None:
            template = route_template(self.routes, scope)
            self.state.metrics.requests.labels(scope["method"], template, str(status)).inc()

        await run_recording_status(self.app, scope, receive, send, record)


def too_large(limit: int) -> SieError:
    return BodyTooLarge(f"Config body exceeds {limit} bytes limit.")


def tokens_of(settings: ConfigServiceSettings) -> Tokens:
    return Tokens(
        secret(settings.config_read_token), secret(settings.auth_token), secret(settings.admin_token)
    )


def create_app(settings: ConfigServiceSettings) -> Starlette:
    refuse_open(settings.deployment_env, tokens_of(settings))
    state = build_state(settings)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        if state.publisher is not None:
            state.publisher.start()
        else:
            log.info("SIE_NATS_URL not set: configs are stored but no deltas are published")
        try:
            yield
        finally:
            if state.publisher is not None:
                await state.publisher.stop()

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> Response:
        return JSONResponse({"status": "ready"})

    async def metrics(request: Request) -> Response:
        require_metrics(request, state.tokens)
        connected = state.publisher is not None and state.publisher.connected
        state.metrics.nats_connected.set(1 if connected else 0)
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    document = openapi.routes_document(
        "sie-config",
        __version__,
        "The cluster's config control plane.",
        api.ROUTES,
        [*ConfigErrorCode, ErrorCode.UNAUTHORIZED, ErrorCode.FORBIDDEN, ErrorCode.INTERNAL_ERROR],
    )

    async def openapi_json(_: Request) -> Response:
        return JSONResponse(document)

    routes = [
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics),
        Route("/openapi.json", openapi_json),
        *api.ROUTES,
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.control = state
    install_errors(app, Envelope.CONFIG)
    app.add_middleware(BodyLimit, limit=api.MAX_BODY_BYTES, envelope=Envelope.CONFIG, refusal=too_large)
    app.add_middleware(RequestCounting, state=state, routes=routes)
    log.info(
        "sie-config %s: %d bundles, %d models (%d from the store), epoch %d",
        __version__,
        len(state.registry.bundles),
        len(state.registry.ids()),
        len(state.registry.api_ids),
        state.epoch,
    )
    return app
