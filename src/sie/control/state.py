"""What every ``sie-config`` route reads: built once by the composition root (``control.app``)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge
from starlette.requests import Request

from sie.control.auth import Tokens
from sie.control.configs import ConfigRegistry
from sie.control.idempotency import IdempotencyCache
from sie.control.publisher import DeltaPublisher
from sie.control.store import ConfigStore


class ControlMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.epoch = Gauge("sie_config_epoch", "The config epoch.", registry=r)
        self.models = Gauge("sie_config_models_total", "Models known, by source.", ["source"], registry=r)
        self.nats_connected = Gauge("sie_config_nats_connected", "1 while NATS is connected.", registry=r)
        self.nats_publishes = Counter(
            "sie_config_nats_publishes", "Delta publishes of a write, by result.", ["result"], registry=r
        )
        self.store_writes = Counter(
            "sie_config_store_writes", "Store writes, by operation and result.", ["op", "result"], registry=r
        )
        self.requests = Counter(
            "sie_config_http_requests", "HTTP requests.", ["method", "path", "status"], registry=r
        )


@dataclass
class ControlState:
    tokens: Tokens
    registry: ConfigRegistry
    store: ConfigStore | None
    publisher: DeltaPublisher | None
    epoch: int = 0
    metrics: ControlMetrics = field(default_factory=ControlMetrics)
    idempotency: IdempotencyCache = field(default_factory=IdempotencyCache)
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def bundle_hash(self, name: str) -> str:
        bundle = self.registry.bundle(name)
        return self.registry.bundle_config_hash(bundle) if bundle is not None else ""

    def bundle_adapters(self, name: str) -> list[str]:
        bundle = self.registry.bundle(name)
        return sorted(bundle.adapters) if bundle is not None else []

    def hashes_hash(self) -> str:
        """The public ``bundle_config_hashes_hash``: each bundle's config hash and its models' pools."""
        if not self.registry.bundles:
            return ""
        by_bundle = {
            b.name: {
                "bundle_config_hash": self.bundle_hash(b.name),
                "model_pools": {
                    m: "default" for m in self.registry.ids() if b.name in self.registry.model_bundles(m)
                },
            }
            for b in self.registry.bundles
        }
        payload = json.dumps(by_bundle, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def refresh_gauges(self) -> None:
        api = len(self.registry.api_ids)
        self.metrics.epoch.set(self.epoch)
        self.metrics.models.labels("api").set(api)
        self.metrics.models.labels("filesystem").set(len(self.registry.ids()) - api)


def state_of(request: Request) -> ControlState:
    state: ControlState = request.app.state.control
    return state
