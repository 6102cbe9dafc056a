"""What every gateway route reads: built once by the composition root (``gateway.app``)."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from sie.engine.admission import Admission
from sie.engine.bundles import Bundle
from sie.gateway.dispatch import Dispatcher
from sie.gateway.metrics import GatewayMetrics
from sie.gateway.pools import Pools
from sie.gateway.routing import Demand, Router
from sie.gateway.settings import GatewaySettings
from sie.gateway.workers import WorkerTable
from sie.queue.payloads import PayloadStore


@dataclass
class GatewayState:
    settings: GatewaySettings
    admission: Admission
    bundles: list[Bundle]  # by priority (routing.by_priority)
    workers: WorkerTable
    demand: Demand
    router: Router
    metrics: GatewayMetrics
    payloads: PayloadStore | None
    dispatcher: Dispatcher | None = None  # None until NATS answers
    pools: Pools | None = None


def state_of(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.gateway
    return state
