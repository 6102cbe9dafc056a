"""The gateway's own routes: probes, ``/health`` (the cluster as ``get_capacity`` reads it),
``/metrics``, and ``/v1/models`` from the catalogue and the workers' heartbeats."""

from __future__ import annotations

from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sie.catalog.catalog import CatalogEntry
from sie.gateway.metrics import OTHER
from sie.gateway.state import GatewayState, state_of
from sie.gateway.workers import Worker
from sie.http.model_info import entry_info
from sie.http.parts import model_path
from sie.queue.contract import DEFAULT_LANE_TOKEN
from sie.wire import codec
from sie.wire.responses import ModelList


async def healthz(_: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """Ready once connected to NATS: without it no request can be served."""
    state = state_of(request)
    dispatcher = state.dispatcher
    healthy = len(state.workers.healthy())
    if dispatcher is None or not dispatcher.client.is_connected:
        return JSONResponse(
            {"status": "not_ready", "reason": "NATS unreachable", "healthy_workers": healthy}, 503
        )
    return JSONResponse({"status": "ready", "healthy_workers": healthy})


def worker_view(worker: Worker) -> dict[str, Any]:
    beat = worker.heartbeat
    return {
        "name": beat.name,
        "url": worker.url,
        "gpu": beat.machine_profile,
        "gpu_count": beat.gpu_count,
        "ready_gpu_slots": beat.ready_gpu_slots if beat.ready else 0,
        "healthy": beat.ready,
        "queue_depth": beat.queue_depth,
        "inflight_batches": beat.inflight_batches,
        "loaded_models": beat.loaded_models,
        "loading_models": beat.loading_models,
        "memory_used_bytes": beat.memory_used_bytes,
        "memory_total_bytes": beat.memory_total_bytes,
        "pool_name": beat.pool_name,
        "machine_profile": beat.machine_profile,
        "bundle": beat.bundle,
        "bundle_config_hash": beat.bundle_config_hash,
    }


def health_body(state: GatewayState) -> dict[str, Any]:
    """The cluster as ``get_capacity`` reads it (and the status page shows it)."""
    workers = state.workers.all()
    healthy = [w for w in workers if w.heartbeat.ready]
    loaded = {m for w in healthy for m in w.heartbeat.loaded_models}
    models = [
        {
            "name": name,
            "state": "loaded",
            "worker_count": sum(name in w.heartbeat.loaded_models for w in healthy),
            "gpu_types": sorted(
                {w.heartbeat.machine_profile for w in healthy if name in w.heartbeat.loaded_models}
            ),
            "total_queue_depth": sum(
                w.heartbeat.queue_depth for w in healthy if name in w.heartbeat.loaded_models
            ),
        }
        for name in sorted(loaded)
    ]
    body = {
        "status": "healthy" if healthy else "degraded",
        "type": "gateway",
        "configured_gpu_types": state.settings.configured_gpus(),
        "live_gpu_types": state.workers.profiles(),
        "cluster": {
            "worker_count": len(healthy),
            "gpu_count": sum(w.heartbeat.gpu_count for w in healthy),
            "models_loaded": len(loaded),
            "total_qps": 0.0,
        },
        "workers": [worker_view(w) for w in workers],
        "models": models,
    }
    return body


async def health(request: Request) -> Response:
    return JSONResponse(health_body(state_of(request)))


async def metrics(request: Request) -> Response:
    state = state_of(request)
    m = state.metrics
    workers = state.workers.all()
    m.workers.labels("healthy").set(sum(w.heartbeat.ready for w in workers))
    m.workers.labels("unhealthy").set(sum(not w.heartbeat.ready for w in workers))
    m.worker_queue_depth.clear()
    m.model_workers.clear()
    counts: dict[str, int] = {}
    for worker in workers:
        beat = worker.heartbeat
        m.worker_queue_depth.labels(beat.name, beat.machine_profile, beat.bundle).set(beat.queue_depth)
        for model in beat.loaded_models:
            counts[model] = counts.get(model, 0) + 1
    for model, count in counts.items():
        m.model_workers.labels(model).set(count)
    m.pending_demand.clear()
    for (pool, profile, bundle), value in state.demand.pending(state.workers).items():
        m.pending_demand.labels(profile or "unknown", bundle, pool or "any").set(value)
    m.active_lease_gpus.clear()
    if state.pools is not None:
        known = {b.name for b in state.bundles} | {DEFAULT_LANE_TOKEN}
        held: dict[tuple[str, str], int] = {}
        for (profile, bundle), count in state.pools.leased_gpus(await state.pools.all()).items():
            key = (state.router.profile_label(profile), bundle if bundle in known else OTHER)
            held[key] = held.get(key, 0) + count  # labels of the operator's only: a pool's are a caller's
        for (profile, bundle), count in held.items():
            m.active_lease_gpus.labels(profile, bundle).set(count)
    dispatcher = state.dispatcher
    m.nats_connected.set(1 if dispatcher is not None and dispatcher.client.is_connected else 0)
    follower = state.follower
    if follower is not None and follower.epoch is not None:
        m.config_epoch.set(follower.epoch)
    return Response(m.render(), media_type=CONTENT_TYPE_LATEST)


def _model(state: GatewayState, entry: CatalogEntry) -> Any:
    holders = [w for w in state.workers.healthy() if entry.name in w.heartbeat.loaded_models]
    loading = any(entry.name in w.heartbeat.loading_models for w in state.workers.healthy())
    status = "loaded" if holders else "loading" if loading else "available"
    return entry_info(entry, status, bool(holders))


async def list_models(request: Request) -> Response:
    state = state_of(request)
    models = [_model(state, entry) for entry in state.admission.catalog.entries()]
    return Response(codec.encode_json(ModelList(models)), media_type=codec.JSON)


async def get_model(request: Request) -> Response:
    state = state_of(request)
    entry = state.admission.require(request.path_params["model"])
    return Response(codec.encode_json(_model(state, entry)), media_type=codec.JSON)


ROUTES = [
    Route("/healthz", healthz),
    Route("/readyz", readyz),
    Route("/health", health),
    Route("/metrics", metrics),
    Route("/v1/models", list_models),
    Route(model_path("/v1/models"), get_model),
]
