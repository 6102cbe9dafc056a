"""The gateway's configuration: ``SIE_*`` variables (the public gateway's names), overridden by flags;
the groups other processes share are in ``common``."""

from __future__ import annotations

from enum import StrEnum

from pydantic import AliasChoices, Field, model_validator

from sie.catalog.follower import FollowerSettings
from sie.queue.streams import DeadLetterLimits
from sie.settings.common import Auth, Catalogue, Cluster, Logging, Tracing, split_csv


class HealthMode(StrEnum):
    """Where a gateway learns which workers are up (``SIE_GATEWAY_HEALTH_MODE``)."""

    NATS = "nats"  # the workers' heartbeats on sie.health.> (what the chart renders)
    WS = "ws"  # each worker's /ws/status, from SIE_GATEWAY_WORKERS or Kubernetes endpoints


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
    gateway_status_max_connections: int = Field(
        32,
        ge=1,
        description="Most /ws/cluster-status viewers at once; the next is closed 1013 (try again later). "
        "All of them share one snapshot a second (1 + P reads of the pools bucket, P pools).",
    )

    payload_store_ttl: float = Field(
        300,
        gt=0,
        description="Seconds after which gateways delete a payload-store object its request left behind "
        "(a killed gateway's); more than the work stream's max age (SIE_STREAM_MAX_AGE_S).",
    )
    gateway_publish_concurrency: int = Field(
        64,
        ge=1,
        description="Work items of one request published at once, each awaiting JetStream's ack; the "
        "first refused publish stops the rest.",
    )
    gateway_tenant_stream_share: float = Field(
        0.25,
        gt=0,
        le=1,
        description="Most of a pool's work stream one token may hold in flight through this gateway.",
    )

    gateway_max_stream_pending: int = Field(
        50_000,
        ge=1,
        description="Items a pool's work stream may hold before the gateway refuses more: 503 QUEUE_FULL "
        "with Retry-After 5 (the stream's depth is read at most every 50 ms).",
    )
    gateway_health_mode: HealthMode = Field(
        HealthMode.NATS,
        description="nats: worker health from their heartbeats on NATS; ws: from each worker's /ws/status "
        "(local diagnostics; SIE_GATEWAY_WORKERS or SIE_GATEWAY_KUBERNETES say where).",
    )
    gateway_workers: str | None = Field(
        None, description="ws mode: worker base URLs (http://host:port), comma-separated."
    )
    gateway_kubernetes: bool = Field(
        False, description="ws mode: find workers as the endpoints of a Kubernetes service (in-cluster API)."
    )
    gateway_k8s_namespace: str = Field("default", description="ws mode: the workers' service's namespace.")
    gateway_k8s_service: str = Field("sie-worker", description="ws mode: the workers' service.")
    gateway_k8s_port: int = Field(8080, ge=1, le=65535, description="ws mode: the workers' HTTP port.")

    gateway_hot_reload: bool = Field(
        False,
        description="Watch the local bundles and models dirs: YAMLs added, changed or deleted are served "
        "without a restart (sie-config's models stay laid over them). The chart sets it.",
    )
    gateway_watch_polling: bool = Field(
        False,
        validation_alias=AliasChoices("SIE_GATEWAY_WATCH_POLLING", "SIE_GATEWAY_POLLING_WATCHER"),
        description="Hot reload polls the folders instead of waiting for file events (volumes that raise "
        "none). SIE_GATEWAY_POLLING_WATCHER is the chart's name for it.",
    )
    gateway_enable_pools: bool | None = Field(
        None,
        description="Read: pools (POST /v1/pools, leases in NATS) are always on here; false is warned about.",
    )
    multi_router: bool | None = Field(
        None,
        description="Read: every gateway shares the pools through NATS already; true is warned about.",
    )
    gateway_machine_profiles: str | None = Field(
        None,
        description="Read and warned about: machine profiles come from SIE_GATEWAY_CONFIGURED_GPUS and the "
        "workers' heartbeats (the public gateway reads it no more than this one).",
    )

    gateway_dlq_max_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        description="Bytes the DEAD_LETTERS stream keeps (item metadata, no payloads); the oldest go first.",
    )
    gateway_dlq_max_msgs: int = Field(
        100_000, ge=1, description="Dead letters the DEAD_LETTERS stream keeps; the oldest go first."
    )

    @model_validator(mode="after")
    def _payloads_outlive_the_stream(self) -> GatewaySettings:
        if self.payload_store_ttl <= self.stream_max_age_s:
            raise ValueError(
                f"SIE_PAYLOAD_STORE_TTL ({self.payload_store_ttl:g}) must be more than SIE_STREAM_MAX_AGE_S "
                f"({self.stream_max_age_s:g}): an item's payload must outlive the item"
            )
        return self

    def moot_variables(self) -> list[tuple[list[tuple[str, bool]], str]]:
        """The public variables set here that this gateway reads and does not act on, each group with
        why (``common.warn_without_effect`` says so once at start)."""
        return [
            (
                [("SIE_GATEWAY_ENABLE_POOLS", self.gateway_enable_pools is False)],
                "pools are always on in this gateway (a pool nobody leases costs nothing, and a request "
                "names its pool itself)",
            ),
            (
                [("SIE_MULTI_ROUTER", bool(self.multi_router))],
                "every gateway reads and writes the pools in the NATS key-value bucket they all share, "
                "so replicas agree without a Kubernetes watcher",
            ),
            (
                [("SIE_GATEWAY_MACHINE_PROFILES", bool(self.gateway_machine_profiles))],
                "the machine profiles this cluster runs are SIE_GATEWAY_CONFIGURED_GPUS and the workers' "
                "own heartbeats",
            ),
        ]

    def worker_urls(self) -> list[str]:
        return [url.rstrip("/") for url in split_csv(self.gateway_workers)]

    def configured_gpus(self) -> list[str]:
        return split_csv(self.gateway_configured_gpus)

    def dead_letter_limits(self) -> DeadLetterLimits:
        return DeadLetterLimits(self.gateway_dlq_max_bytes, self.gateway_dlq_max_msgs)

    def follower_settings(self) -> FollowerSettings | None:
        return self.follower(
            self.gateway_config_poll_interval_ms, self.gateway_config_full_export_interval_ms
        )
