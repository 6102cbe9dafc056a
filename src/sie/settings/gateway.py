"""The gateway's configuration: ``SIE_*`` variables (the public gateway's names), overridden by flags;
the groups other processes share are in ``common``."""

from __future__ import annotations

from pydantic import Field

from sie.catalog.follower import FollowerSettings
from sie.settings.common import Auth, Catalogue, Cluster, Logging, Tracing, split_csv


class GatewaySettings(Auth, Catalogue, Cluster, Logging, Tracing):
    gateway_host: str = Field("0.0.0.0", description="Interface to listen on (--host).")
    gateway_port: int = Field(8080, ge=0, le=65535, description="TCP port (--port).")
    gateway_request_timeout: float = Field(
        30.0, gt=0, description="Seconds a request waits for its results before 503 MODEL_LOADING."
    )
    gateway_configured_gpus: str | None = Field(
        None, description="Comma-separated machine profiles this cluster runs (routing and scale from zero)."
    )
    gateway_provisioning_retry_after_s: int = Field(
        120, ge=1, description="Retry-After of a 202 provisioning answer."
    )
    gateway_config_poll_interval_ms: float = Field(
        30000, gt=0, description="How often sie-config's epoch is read to recover missed deltas."
    )
    gateway_config_full_export_interval_ms: float = Field(
        300000, ge=0, description="How often sie-config's whole export is read regardless (0: never)."
    )
    # A gateway takes the largest bodies of the cluster (the public gateway's 256 MiB): its items go
    # on to workers one by one, each under the server's own limit.
    max_request_body_bytes: int = Field(256 * 1024 * 1024, ge=1, description="Largest request body.")

    def configured_gpus(self) -> list[str]:
        return split_csv(self.gateway_configured_gpus)

    def follower_settings(self) -> FollowerSettings | None:
        return self.follower(
            self.gateway_config_poll_interval_ms, self.gateway_config_full_export_interval_ms
        )
