"""The gateway's configuration: ``SIE_*`` variables (the public gateway's names), overridden by flags."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from sie.catalog.follower import FollowerSettings, follower_settings
from sie.settings import PACKAGED_BUNDLES_DIR, PACKAGED_MODELS_DIR, split_csv


class GatewaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SIE_", extra="ignore")

    gateway_host: str = Field("0.0.0.0", description="Interface to listen on (--host).")
    gateway_port: int = Field(8080, ge=0, le=65535, description="TCP port (--port).")
    nats_url: str | None = Field(None, description="NATS server(s), comma-separated.")
    gateway_request_timeout: float = Field(
        30.0, gt=0, description="Seconds a request waits for its results before 503 MODEL_LOADING."
    )
    gateway_configured_gpus: str | None = Field(
        None, description="Comma-separated machine profiles this cluster runs (routing and scale from zero)."
    )
    gateway_provisioning_retry_after_s: int = Field(
        120, ge=1, description="Retry-After of a 202 provisioning answer."
    )
    health_publish_interval_ms: float = Field(
        5000, gt=0, description="Workers' heartbeat period; a worker silent for three is forgotten."
    )
    payload_store_url: str | None = Field(
        None, description="Store for items over 1 MiB: a shared folder, s3://bucket/prefix or gs://..."
    )
    auth_mode: str = Field("none", description="none, or token/static (bearer tokens).")
    auth_token: str | None = Field(None, description="The accepted bearer token.")
    auth_tokens: str | None = Field(None, description="Accepted bearer tokens, comma-separated.")
    auth_exempt_operational: bool = Field(False, description="Leave /, /health, /metrics open.")
    admin_token: str | None = Field(None, description="Bearer token for pool and config mutations.")
    config_service_url: str | None = Field(
        None, description="sie-config's URL: bootstrap, deltas and epoch polling of API-added models."
    )
    config_read_token: str | None = Field(None, description="Bearer token for sie-config's reads.")
    gateway_config_poll_interval_ms: float = Field(
        30000, gt=0, description="How often sie-config's epoch is read to recover missed deltas."
    )
    gateway_config_full_export_interval_ms: float = Field(
        300000, ge=0, description="How often sie-config's whole export is read regardless (0: never)."
    )
    nats_config_trusted_producers: str = Field(
        "sie-config", description="Producer ids (or id prefixes before '-') whose config deltas apply."
    )
    nats_config_trust_any_producer: bool = Field(False, description="Apply config deltas from anyone.")
    models_dir: str = Field(str(PACKAGED_MODELS_DIR), description="Model YAMLs (validation, bundles).")
    bundles_dir: Path = Field(PACKAGED_BUNDLES_DIR, description="Bundle YAMLs.")
    max_request_body_bytes: int = Field(256 * 1024 * 1024, ge=1, description="Largest request body.")
    max_item_text_bytes: int = Field(2 * 1024 * 1024, ge=1, description="Largest text of one item (413).")
    log_json: bool = Field(False, description="One JSON object per log line.")
    log_level: str = Field("INFO", description="Log level.")

    def nats_servers(self) -> list[str]:
        return split_csv(self.nats_url)

    def configured_gpus(self) -> list[str]:
        return split_csv(self.gateway_configured_gpus)

    def follower_settings(self) -> FollowerSettings | None:
        return follower_settings(
            self.config_service_url,
            self.config_read_token or self.admin_token,
            self.gateway_config_poll_interval_ms,
            self.gateway_config_full_export_interval_ms,
            self.nats_config_trusted_producers,
            self.nats_config_trust_any_producer,
        )

    def tokens(self) -> list[str]:
        return split_csv(self.auth_tokens) or split_csv(self.auth_token)
