"""The composition root of the standalone server: settings in, a ready ASGI app out.

Start order: catalog (fails fast on a bad YAML) → the upstreams file (``server.remote``) → the engine's
runtime (``engine.runtime``: engine, preload, hot reload) → the router over both → serve. Shutdown
(``server.graceful``): SIGTERM → not ready, new requests refused → drain the requests in flight → close
the listener → stop the runtime (fail whatever is still queued, unload models) → close the upstreams.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from sie import __version__
from sie.catalog.bundles import DEFAULT_BUNDLE, Bundle, CatalogHash, load_bundle
from sie.catalog.follower import ConfigFollower
from sie.engine.engine import Engine
from sie.http.auth import Auth
from sie.http.errors import Envelope
from sie.http.errors import install as install_errors
from sie.http.middleware import BodyLimit, IdentityHeaders, SdkVersionSkew
from sie.http.routes import HotRoutes
from sie.observability import tracing
from sie.observability.metrics import Metrics
from sie.queue.contract import Heartbeat, lane_of
from sie.server import openapi_docs
from sie.server.api import (
    encode,
    generate,
    health,
    models,
    openai_compat,
    openai_generate,
    rerank,
    score_extract,
    status_page,
    ws,
)
from sie.server.lifecycle import Draining, Lifecycle
from sie.server.remote.router import Router
from sie.server.remote.setup import upstream_pool
from sie.server.request_metrics import RequestMetrics
from sie.server.runtime import EngineRuntime
from sie.server.status import WorkerIdentity
from sie.settings.common import Host, secret, warn_without_effect
from sie.settings.server import Settings

if TYPE_CHECKING:  # nats-py is the cluster extra's: imported only when SIE_NATS_URL is set
    from sie.worker.queue_worker import QueueWorker

log = logging.getLogger(__name__)


def warn_moot_variables(settings: Settings) -> None:
    """The public variables this server reads but has no use for (``Settings.moot_variables``: the
    sidecar's, adaptive batching's, a telemetry URL) are told once at start, not silently ignored."""
    for named, why in settings.moot_variables():
        warn_without_effect(named, why, log)


def worker_identity(settings: Settings) -> WorkerIdentity:
    """What ``/ws/status`` reports about this worker; the name is the pod's (``HOSTNAME``/``POD_NAME``)."""
    bundle_name = settings.bundle or DEFAULT_BUNDLE
    host = Host()
    try:
        scope: Bundle | None = load_bundle(bundle_name, settings.bundles_dir)
    except ValueError:  # a bundles dir without the default bundle: nothing to scope the hash by
        scope = None
    return WorkerIdentity(
        name=host.hostname or host.pod_name,
        machine_profile=settings.profile(),
        pool_name=settings.pool,
        bundle=bundle_name,
        config_hash=CatalogHash(scope),
        max_batch_requests=settings.max_batch_requests,
        memory_threshold_pct=settings.memory_pressure_threshold_percent,
        version=__version__,
        gpu_type=settings.gpu_type_override(),
    )


def queue_worker(
    settings: Settings,
    engine: Engine,
    identity: WorkerIdentity,
    lifecycle: Lifecycle,
    metrics: Metrics,
    follower: ConfigFollower | None,
) -> QueueWorker:
    """The same process is also a queue-mode worker (``SIE_NATS_URL``): see docs/cluster.md."""
    try:
        from sie.worker.adaptive import AdaptiveWait
        from sie.worker.heartbeat import heartbeat
        from sie.worker.pull import Redelivery
        from sie.worker.queue_worker import QueueWorker, WorkerConfig
        from sie.worker.work import NakDelays
    except ImportError as exc:  # nats-py is the cluster extra's
        raise RuntimeError(
            f"SIE_NATS_URL is set but {exc.name} is missing: pip install 'sie-engine[cluster]'"
        ) from exc
    lane = lane_of(settings.pool, settings.profile(), settings.bundle)
    worker_id = settings.worker_id or Host().name()
    wait = AdaptiveWait(
        settings.adaptive_min_quantum_ms / 1000,
        settings.adaptive_max_quantum_ms / 1000,
        settings.adaptive_target_p50_ms / 1000,
    )
    config = WorkerConfig(
        nats=settings.nats_access(),
        lane=lane,
        worker_id=worker_id,
        wait=wait,
        max_in_flight=settings.max_concurrent_batches * settings.batch_items(),
        fetch_budget=settings.nats_fetch_budget,
        hold_s=settings.nats_hold_s,
        heartbeat_interval_s=settings.health_publish_interval_ms / 1000,
        ping_interval_s=settings.worker_ping_interval_ms / 1000,
        readyz_stale_mult=settings.worker_readyz_stale_mult,
        probe_host=settings.host,
        probe_port=settings.worker_metrics_port,
        gateway_url=settings.gateway_url,
        gateway_token=secret(settings.auth_token),
        admission_enabled=settings.pool_admission_enabled,
        payload_store_url=settings.payload_store_url,
        redelivery=Redelivery(
            settings.max_deliver,
            settings.stream_max_age_s,
            settings.stream_replicas,
            NakDelays(settings.nak_delay_s, settings.oom_nak_delay_s),
        ),
    )
    gpu_count = settings.gpu_count

    def snapshot() -> Heartbeat:
        return heartbeat(engine, identity.config_hash, lifecycle.draining, lane, worker_id, gpu_count)

    return QueueWorker(engine, config, snapshot, metrics, lambda: lifecycle.draining, follower)


def create_app(settings: Settings) -> FastAPI:
    # The tokenizer pool already runs tokenization beside the forward pass; the Rust tokenizer's own
    # per-call thread pool would add one thread per core on top and fight the forward for the cores.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    queue_mode = settings.queue_mode()  # a SIE_CLUSTER_ROUTING other than queue stops startup here
    runtime = EngineRuntime(settings)  # parses the catalogue: a bad YAML stops startup here
    warn_moot_variables(settings)
    tracing.setup("sie-server", settings.tracing_enabled)  # and the OTEL_* variables
    metrics = runtime.metrics
    lifecycle = Lifecycle(settings.drain_timeout_s, settings.drain_min_s)
    identity = worker_identity(settings)
    metrics.in_flight.set_function(lambda: lifecycle.in_flight)
    upstreams = upstream_pool(settings)  # remote profiles' upstreams (SIE_UPSTREAMS_FILE)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[dict[str, Any]]:
        engine = await runtime.start()
        router = Router(engine, upstreams)
        lifecycle.on_overdue = engine.close
        following = settings.follower_settings()
        follower = ConfigFollower(following, runtime.apply_overlay, "worker") if following else None
        stop_following = asyncio.Event()
        tasks = (
            [asyncio.create_task(follower.run(stop_following), name="sie-config-follower")]
            if follower
            else []
        )
        queue = None
        if queue_mode:
            queue = queue_worker(settings, engine, identity, lifecycle, metrics, follower)
            await queue.start()
        try:
            yield {
                "engine": engine,
                "router": router,
                "metrics": metrics,
                "lifecycle": lifecycle,
                "status_identity": identity,
            }
        finally:
            lifecycle.draining = True
            stop_following.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            if follower is not None:
                await follower.close()
            if queue is not None:
                await queue.stop()  # items in flight finish and are acked; the rest is redelivered
            await runtime.stop()
            await upstreams.aclose()
            tracing.shutdown()

    app = FastAPI(
        title="SIE Server",
        description="Inference engine for search workloads: encode, score, extract.",
        version=__version__,
        lifespan=lifespan,
        # Our spans are ``observability.tracing``'s (gateway -> worker -> engine -> phases) and our
        # metrics the ``sie_*`` families. FastAPI's own OpenTelemetry layer would add HTTP spans and
        # ``http.server.*`` metrics beside them whenever a provider is set, and asks the providers on
        # every request when none is (a measurable share of a lone request's CPU).
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    inference = (
        *encode.ROUTES,
        *score_extract.ROUTES,
        *openai_compat.ROUTES,
        *rerank.ROUTES,
        *generate.ROUTES,
        *openai_generate.ROUTES,
    )
    # First in the table, where ``HotRoutes`` (below) serves them from: they carry nearly every request.
    hot = [route.route() for route in inference]
    app.router.routes[0:0] = hot
    for router in (health.router, models.router, ws.router, status_page.router):
        app.include_router(router)
    install_errors(app, Envelope.NATIVE)  # the table's errors, and the outermost catch-all: JSON 500
    # Added innermost first; a request meets them in the reverse order (identity headers outermost).
    app.add_middleware(HotRoutes, routes=hot, handlers=app.exception_handlers)
    app.add_middleware(SdkVersionSkew, server_version=__version__)
    openai_routes = [route for route, declared in zip(hot, inference, strict=True) if declared.openai_errors]
    app.add_middleware(BodyLimit, limit=settings.max_request_body_bytes, openai_routes=openai_routes)
    app.add_middleware(Auth, config=settings.auth_config(), envelope=Envelope.NATIVE)  # before a body is read
    app.add_middleware(RequestMetrics, metrics=metrics)
    app.add_middleware(Draining, lifecycle=lifecycle, openai_routes=tuple(openai_routes))
    app.add_middleware(IdentityHeaders)
    app.state.lifecycle = lifecycle  # the server's SIGTERM handling drives the same object
    example = runtime.preload[0] if runtime.preload else next(iter(runtime.catalog.names()), None)
    openapi_docs.install(app, __version__, inference, models.STRUCTS, example)
    return app
