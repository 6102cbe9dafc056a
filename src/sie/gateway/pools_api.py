"""``/v1/pools``: create (or update and renew), list, get, delete and renew resource pools."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sie.catalog.errors import InvalidInput
from sie.gateway.errors import PoolNotFound, QueueUnreachable
from sie.gateway.pools import DEFAULT_POOL, PoolError, Pools, parse_spec
from sie.gateway.state import state_of
from sie.http.auth import principal_of
from sie.http.errors import Forbidden


def _pools(request: Request) -> Pools:
    pools = state_of(request).pools
    if pools is None:
        raise QueueUnreachable("Pools need NATS, which is not reachable yet")
    return pools


async def create(request: Request) -> Response:
    pools = _pools(request)
    state = state_of(request)
    try:
        spec = parse_spec(await request.body(), state.settings.configured_gpus())
    except PoolError as exc:
        raise InvalidInput(str(exc)) from exc
    view = await pools.create(spec, principal_of(request))
    state.metrics.pool_events.labels("created").inc()
    return JSONResponse(view, 201)


async def list_pools(request: Request) -> Response:
    pools = _pools(request)
    return JSONResponse({"pools": await pools.all()})


async def get_pool(request: Request) -> Response:
    pools = _pools(request)
    name = request.path_params["name"]
    view = await pools.get(name)
    if view is None:
        raise PoolNotFound(name)
    return JSONResponse(view)


async def delete_pool(request: Request) -> Response:
    pools = _pools(request)
    name = request.path_params["name"]
    if name.lower() == DEFAULT_POOL:
        raise Forbidden("The default pool cannot be deleted")
    if not await pools.delete(name, principal_of(request)):
        raise PoolNotFound(name)
    state_of(request).metrics.pool_events.labels("deleted").inc()
    return JSONResponse({"message": "Pool deleted"})


async def renew(request: Request) -> Response:
    pools = _pools(request)
    name = request.path_params["name"]
    if not await pools.renew(name, principal_of(request)):
        raise PoolNotFound(name)
    state_of(request).metrics.pool_events.labels("renewed").inc()
    return JSONResponse({"message": "Pool renewed"})


ROUTES = [
    Route("/v1/pools", create, methods=["POST"]),
    Route("/v1/pools", list_pools, methods=["GET"]),
    Route("/v1/pools/{name}", get_pool, methods=["GET"]),
    Route("/v1/pools/{name}", delete_pool, methods=["DELETE"]),
    Route("/v1/pools/{name}/renew", renew, methods=["POST"]),
]
