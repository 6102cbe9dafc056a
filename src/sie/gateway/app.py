"""The composition root of ``sie-gateway``: settings in, an ASGI app out.

Start: the catalogue and bundles (a bad YAML stops startup, as on the server) → the HTTP app, which
serves at once → NATS in the background (``/readyz`` answers 503 and inference 503 ``QUEUE_FULL``
until it connects) → the inbox, the heartbeat subscription (with ``SIE_GATEWAY_HEALTH_MODE=ws``: the
workers' ``/ws/status`` readers instead, from the start), pools, dead letters and the pool sweep.
The payload store's sweep (``SIE_PAYLOAD_STORE_TTL``) runs from the start, NATS or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

from nats.aio.client import Client
from nats.aio.msg import Msg
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sie import __version__
from sie.catalog.admission import Admission
from sie.catalog.bundles import Bundle, bundle_names, load_bundle
from sie.catalog.catalog import Catalog
from sie.catalog.follower import ConfigFollower
from sie.catalog.hot_reload import watch_folders
from sie.catalog.source import models_directory
from sie.gateway import cluster_api, config_api, inference, pools_api, status_page
from sie.gateway.dead_letters import DeadLetters
from sie.gateway.dispatch import Dispatcher
from sie.gateway.errors import WORKER_CODES
from sie.gateway.metrics import GatewayMetrics, RequestCounting
from sie.gateway.pools import Pools
from sie.gateway.routing import Demand, Router, by_priority
from sie.gateway.shares import StreamShares
from sie.gateway.state import GatewayState
from sie.gateway.status_feed import StatusFeeds
from sie.gateway.workers import WorkerTable
from sie.http import openapi
from sie.http.auth import Auth
from sie.http.errors import Envelope
from sie.http.errors import install as install_errors
from sie.http.middleware import BodyLimit, IdentityHeaders
from sie.http.routes import HotRoutes
from sie.observability import tracing
from sie.queue.connection import connect, until_answered
from sie.queue.contract import CONFIG_ALL_SUBJECT, HEALTH_SUBJECT_PREFIX, ContractError, decode_heartbeat
from sie.queue.payloads import PayloadStore, sweep_payloads
from sie.settings.common import secret, warn_without_effect
from sie.settings.gateway import GatewaySettings, HealthMode
from sie.weights.remote_fs import is_remote

log = logging.getLogger(__name__)

POOL_SWEEP_S: Final = 1.0  # a listing of the pools' bucket: cheap, and leases lapse on time


def read_local(models: Path, bundles_dir: Path) -> tuple[Catalog, list[Bundle]]:
    """The models dir's catalogue and the bundles dir's bundles (by priority); a bad YAML raises."""
    bundles = by_priority([load_bundle(name, bundles_dir) for name in bundle_names(bundles_dir)])
    return Catalog.from_directory(models), bundles


def build_state(settings: GatewaySettings) -> GatewayState:
    folder = models_directory(settings.models_dir)
    catalog, bundles = read_local(folder, settings.bundles_dir)
    workers = WorkerTable(stale_after_s=3 * settings.health_publish_interval_ms / 1000)
    demand = Demand()
    return GatewayState(
        settings=settings,
        admission=Admission(catalog, settings.request_limits()),
        bundles=bundles,
        workers=workers,
        demand=demand,
        router=Router(
            workers, demand, settings.configured_gpus(), settings.gateway_provisioning_retry_after_s
        ),
        metrics=GatewayMetrics(),
        payloads=PayloadStore(settings.payload_store_url) if settings.payload_store_url else None,
        shares=StreamShares(settings.gateway_tenant_stream_share),
        local_catalog=catalog,
        models_folder=folder,
    )


async def join_cluster(state: GatewayState) -> Client:
    """Connect (retrying until NATS answers), then subscribe and create what the gateway owns."""

    async def reconnected() -> None:
        if state.dispatcher is not None:
            state.dispatcher.forget_streams()  # a new server may not have them
        log.info("reconnected to NATS")

    access = state.settings.nats_access()
    client = await connect(access, "sie-gateway", reconnected)

    async def on_heartbeat(message: Msg) -> None:
        try:
            state.workers.update(decode_heartbeat(message.data))
        except ContractError as exc:
            log.debug("ignoring a heartbeat: %s", exc)

    if state.settings.gateway_health_mode is HealthMode.NATS:  # ws: ``status_feed`` fills the table
        await client.subscribe(f"{HEALTH_SUBJECT_PREFIX}.>", cb=on_heartbeat)
    follower = state.follower
    if follower is not None:

        async def on_delta(message: Msg) -> None:
            await follower.on_delta(message.data)

        await client.subscribe(CONFIG_ALL_SUBJECT, cb=on_delta)
    settings = state.settings
    dispatcher = Dispatcher(
        client,
        state.metrics,
        settings.gateway_publish_concurrency,
        settings.stream_max_age_s,
        settings.gateway_max_stream_pending,
        settings.stream_replicas,
    )
    await dispatcher.start()
    pools = Pools(client.jetstream(), state.workers, replicas=settings.stream_replicas)
    # JetStream may not answer yet (a cluster electing its leaders): a join that gave up here would
    # leave the gateway up and never ready.
    await until_answered("the pools' bucket", pools.start)
    dead_letters = DeadLetters(client, state.metrics, settings.dead_letter_limits(), settings.stream_replicas)
    await until_answered("the dead-letter stream", dead_letters.start)
    state.pools, state.dispatcher = pools, dispatcher
    log.info("joined NATS at %s as router %s", access.described(), dispatcher.router_id)
    return client


async def sweep_pools(state: GatewayState, stop: asyncio.Event) -> None:
    # ``stop`` as well as the cancel: Python 3.11's wait_for (inside nats-py's requests) can swallow a
    # cancellation that lands as its future completes.
    while not stop.is_set():
        await asyncio.sleep(POOL_SWEEP_S)
        if state.pools is None:
            continue
        try:
            for _ in await state.pools.sweep():
                state.metrics.pool_events.labels("expired").inc()
        except Exception:
            log.warning("pool sweep failed", exc_info=True)


def health_source(settings: GatewaySettings, workers: WorkerTable) -> StatusFeeds | None:
    """The ``/ws/status`` readers of the WebSocket health mode, None in NATS mode; refuses what this
    gateway cannot do (Kubernetes endpoint discovery) and says once what it leaves unread."""
    k8s = "SIE_GATEWAY_KUBERNETES"
    if settings.gateway_health_mode is HealthMode.NATS:
        if settings.gateway_kubernetes or settings.gateway_workers:
            log.info(
                "health mode nats: workers are known from their heartbeats on NATS; SIE_GATEWAY_WORKERS, "
                "%s and SIE_GATEWAY_K8S_* are read in SIE_GATEWAY_HEALTH_MODE=ws only",
                k8s,
            )
        return None
    if settings.gateway_kubernetes:
        raise ValueError(
            f"{k8s}=true: this gateway does not discover workers through the Kubernetes API; list their "
            "URLs in SIE_GATEWAY_WORKERS (e.g. each pod's name on the workers' headless service), or use "
            "SIE_GATEWAY_HEALTH_MODE=nats (what the chart renders: the workers' heartbeats)"
        )
    urls = settings.worker_urls()
    if not urls:
        raise ValueError("SIE_GATEWAY_HEALTH_MODE=ws reads each worker's /ws/status: set SIE_GATEWAY_WORKERS")
    log.info("health mode ws: reading /ws/status of %s", ", ".join(urls))
    return StatusFeeds(urls, workers, secret(settings.auth_token))


def hot_reload(state: GatewayState) -> Coroutine[None, None, None] | None:
    """With ``SIE_GATEWAY_HOT_RELOAD``, a watcher of the bundles and models dirs that swaps them in
    (polling with ``SIE_GATEWAY_WATCH_POLLING``); None without it, or with a remote models dir (read
    once, at start)."""
    settings = state.settings
    if not settings.gateway_hot_reload:
        return None
    if is_remote(settings.models_dir):
        log.info("SIE_GATEWAY_HOT_RELOAD: %s is read at start only (not a local folder)", settings.models_dir)
        return None
    models, bundles = state.models_folder, settings.bundles_dir
    return watch_folders(
        [models, bundles],
        lambda: read_local(models, bundles),
        state.apply_local,
        settings.gateway_watch_polling,
    )


def create_app(settings: GatewaySettings) -> Starlette:
    state = build_state(settings)
    feeds = health_source(settings, state.workers)
    for named, why in settings.moot_variables():
        warn_without_effect(named, why, log)
    tracing.setup("sie-gateway", settings.tracing_enabled)  # and the OTEL_* variables
    following = settings.follower_settings()
    if following is not None:
        state.follower = ConfigFollower(following, state.apply_configs, "gateway")

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        joining = asyncio.create_task(join_cluster(state), name="sie-gateway-join")
        stop = asyncio.Event()
        tasks = [asyncio.create_task(sweep_pools(state, stop), name="sie-gateway-pool-sweep")]
        if state.payloads is not None:  # what a killed gateway left in the store
            sweep = sweep_payloads(state.payloads, settings.payload_store_ttl, stop)
            tasks.append(asyncio.create_task(sweep, name="sie-gateway-payload-sweep"))
        if state.follower is not None:
            tasks.append(asyncio.create_task(state.follower.run(stop), name="sie-gateway-config"))
        if feeds is not None:
            tasks.append(asyncio.create_task(feeds.run(stop), name="sie-gateway-status-feeds"))
        watching = hot_reload(state)
        if watching is not None:
            tasks.append(asyncio.create_task(watching, name="sie-gateway-hot-reload"))
        try:
            yield
        finally:
            stop.set()
            for task in tasks:
                task.cancel()
            joining.cancel()
            await asyncio.gather(*tasks, joining, return_exceptions=True)
            if state.follower is not None:
                await state.follower.close()
            tracing.shutdown()
            if joining.done() and not joining.cancelled() and joining.exception() is None:
                with contextlib.suppress(Exception):
                    await joining.result().close()

    if not settings.nats_servers():
        raise ValueError("sie-gateway needs SIE_NATS_URL (the cluster's NATS server or servers)")
    document = openapi.document(
        "sie-gateway",
        __version__,
        "The cluster's front door: encode, score and extract through the queue to the workers.",
        inference.ROUTES,
        openapi.rules_for(WORKER_CODES),
    )

    async def openapi_json(_: Request) -> Response:
        return JSONResponse(document)

    hot = [route.route() for route in inference.ROUTES]
    routes = [
        *hot,
        Route("/openapi.json", openapi_json),
        *cluster_api.ROUTES,
        *pools_api.ROUTES,
        *config_api.ROUTES,
        *status_page.routes(state, settings.gateway_status_max_connections),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.gateway = state
    install_errors(app, Envelope.GATEWAY)
    # Added innermost first: auth sees a request before anything reads its body; the inference routes
    # are served from the innermost (``HotRoutes``), past Starlette's routing and exception layers.
    app.add_middleware(HotRoutes, routes=hot, handlers=app.exception_handlers)
    app.add_middleware(BodyLimit, limit=settings.max_request_body_bytes, envelope=Envelope.GATEWAY)
    app.add_middleware(Auth, config=settings.auth_config(), envelope=Envelope.GATEWAY)
    app.add_middleware(RequestCounting, metrics=state.metrics, profile=state.router.profile_label)
    app.add_middleware(IdentityHeaders)
    log.info(
        "sie-gateway %s: %d models, %d bundles",
        __version__,
        len(state.admission.catalog.names()),
        len(state.bundles),
    )
    return app
