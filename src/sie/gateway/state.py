"""What every gateway route reads: built once by the composition root (``gateway.app``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from starlette.requests import Request

from sie.catalog.admission import Admission
from sie.catalog.bundles import Bundle
from sie.catalog.catalog import Catalog
from sie.catalog.follower import ConfigFollower
from sie.catalog.model_config import ModelConfig
from sie.gateway.dispatch import Dispatcher
from sie.gateway.metrics import GatewayMetrics
from sie.gateway.pools import Pools
from sie.gateway.routing import Demand, Router
from sie.gateway.shares import StreamShares
from sie.gateway.workers import WorkerTable
from sie.queue.payloads import PayloadStore
from sie.settings.gateway import GatewaySettings


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
    shares: StreamShares
    local_catalog: Catalog  # the models dir; sie-config's models are laid over it into ``admission``
    models_folder: Path  # what relative weight paths in sie-config's models resolve against
    follower: ConfigFollower | None = None
    dispatcher: Dispatcher | None = None  # None until NATS answers
    pools: Pools | None = None
    overlay: dict[str, ModelConfig] = field(default_factory=dict)  # sie-config's models, as last applied

    async def apply_configs(self, configs: dict[str, ModelConfig]) -> None:
        """Serve sie-config's models from now on: swapped in whole, so a request sees one catalogue."""
        self.overlay = configs
        catalog = self.local_catalog.overlaid((c, self.models_folder) for c in configs.values())
        self.admission = Admission(catalog, self.admission.limits)

    async def apply_local(self, local: tuple[Catalog, list[Bundle]]) -> None:
        """The models and bundles dirs as reloaded (``SIE_GATEWAY_HOT_RELOAD``): sie-config's models
        stay laid over the new models dir."""
        self.local_catalog, self.bundles = local
        await self.apply_configs(self.overlay)


def state_of(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.gateway
    return state
