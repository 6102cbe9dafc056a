"""The gateway's capacity and pool calls, without I/O: what to send and how to read the answer.

Pools are leases: ``create_pool`` starts renewing its pool every ``LEASE_RENEWAL_S`` (the gateway's
lease lasts 1200 s unless the pool says otherwise) until ``delete_pool`` or ``close``.
"""

from __future__ import annotations

from typing import Any, Final

import httpx

from sie.sdk._decode import raise_for_error
from sie.sdk._errors import PoolError, RequestError
from sie.sdk._fields import given
from sie.sdk._types import CapacityInfo, PoolInfo, WorkerInfo

LEASE_RENEWAL_S: Final = 60.0
CAPACITY_POLL_S: Final = 5.0

_WORKER_FIELDS: Final = tuple(WorkerInfo.__annotations__)


def capacity(response: httpx.Response, gpu: str | None) -> CapacityInfo:
    """``/health`` of a gateway as ``CapacityInfo``; ``gpu`` keeps that profile's workers only."""
    raise_for_error(response, None)
    data = response.json()
    if data.get("type") != "gateway":
        raise RequestError(
            "get_capacity() needs a gateway; this endpoint is a server", code="not_gateway", status_code=400
        )
    workers = data.get("workers", [])
    if gpu:
        workers = [w for w in workers if str(w.get("gpu", "")).lower() == gpu.lower()]
    cluster = data.get("cluster", {})
    return CapacityInfo(
        status=data.get("status", "unknown"),
        worker_count=sum(bool(w.get("healthy")) for w in workers) if gpu else cluster.get("worker_count", 0),
        gpu_count=cluster.get("gpu_count", 0),
        models_loaded=cluster.get("models_loaded", 0),
        configured_gpu_types=data.get("configured_gpu_types", []),
        live_gpu_types=data.get("live_gpu_types", []),
        workers=[WorkerInfo(**{k: w[k] for k in _WORKER_FIELDS if k in w}) for w in workers],  # type: ignore[typeddict-item]
    )


def pool_body(
    name: str,
    gpus: dict[str, int] | None,
    gpu_caps: dict[str, int] | None,
    bundle: str | None,
    minimum_worker_count: int | None,
    pinned_models: list[str] | None,
    queue_pool: str | None,
) -> dict[str, Any]:
    if minimum_worker_count is not None and minimum_worker_count < 0:
        raise ValueError("minimum_worker_count must be >= 0")
    fields = {
        "gpus": gpus,
        "gpu_caps": gpu_caps,
        "bundle": bundle,
        "minimum_worker_count": minimum_worker_count,
        "pinned_models": pinned_models,
        "queue_pool": queue_pool,
    }
    return {"name": name, **given(fields)}


def _message(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text
    detail = data.get("detail") if isinstance(data, dict) else None
    if isinstance(detail, dict) and "message" in detail:
        return str(detail["message"])
    return str(data.get("message", data)) if isinstance(data, dict) else str(data)


def check_pool(response: httpx.Response, name: str, action: str) -> None:
    if response.status_code >= 400:
        raise PoolError(f"Failed to {action} pool '{name}': {_message(response)}", pool_name=name)


def pool_info(response: httpx.Response, name: str) -> PoolInfo | None:
    if response.status_code == 404:
        return None
    check_pool(response, name, "get")
    data = response.json()
    return PoolInfo(name=data.get("name", name), spec=data.get("spec", {}), status=data.get("status", {}))


def deleted(response: httpx.Response, name: str) -> bool:
    if response.status_code == 404:
        return False
    check_pool(response, name, "delete")
    return True
