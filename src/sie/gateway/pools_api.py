"""``/v1/pools``: create (or update and renew), list, get, delete and renew resource pools."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sie.gateway.pools import DEFAULT_POOL, PoolError, Pools, parse_spec
from sie.gateway.state import state_of
from sie.wire.errors import ErrorCode, error_envelope


def _pools(request: Request) -> Pools | None:
    return state_of(request).pools


def _unavailable() -> Response:
    return JSONResponse(
        error_envelope(ErrorCode.QUEUE_FULL, "Pools need NATS, which is not reachable yet"), 503
    )


def _not_found(name: str) -> Response:
    return JSONResponse(
        {
            "message": f"Pool '{name}' not found",
            **error_envelope("POOL_NOT_FOUND", f"Pool '{name}' not found"),
        },
        404,
    )


async def create(request: Request) -> Response:
    pools = _pools(request)
    if pools is None:
        return _unavailable()
    state = state_of(request)
    try:
        spec = parse_spec(await request.body(), state.settings.configured_gpus())
    except PoolError as exc:
        return JSONResponse({"message": str(exc), **error_envelope(ErrorCode.INVALID_INPUT, str(exc))}, 400)
    view = await pools.create(spec)
    state.metrics.pool_events.labels("created").inc()
    return JSONResponse(view, 201)


async def list_pools(request: Request) -> Response:
    pools = _pools(request)
    if pools is None:
        return _unavailable()
    return JSONResponse({"pools": await pools.all()})


async def get_pool(request: Request) -> Response:
    pools = _pools(request)
    if pools is None:
        return _unavailable()
    name = request.path_params["name"]
    view = await pools.get(name)
    return JSONResponse(view) if view is not None else _not_found(name)


async def delete_pool(request: Request) -> Response:
    pools = _pools(request)
    if pools is None:
        return _unavailable()
    name = request.path_params["name"]
    if name.lower() == DEFAULT_POOL:
        message = "The default pool cannot be deleted"
        return JSONResponse({"message": message, **error_envelope("FORBIDDEN", message)}, 403)
    if not await pools.delete(name):
        return _not_found(name)
    state_of(request).metrics.pool_events.labels("deleted").inc()
    return JSONResponse({"message": "Pool deleted"})


async def renew(request: Request) -> Response:
    pools = _pools(request)
    if pools is None:
        return _unavailable()
    name = request.path_params["name"]
    if not await pools.renew(name):
        return _not_found(name)
    state_of(request).metrics.pool_events.labels("renewed").inc()
    return JSONResponse({"message": "Pool renewed"})


ROUTES = [
    Route("/v1/pools", create, methods=["POST"]),
    Route("/v1/pools", list_pools, methods=["GET"]),
    Route("/v1/pools/{name}", get_pool, methods=["GET"]),
    Route("/v1/pools/{name}", delete_pool, methods=["DELETE"]),
    Route("/v1/pools/{name}/renew", renew, methods=["POST"]),
]
