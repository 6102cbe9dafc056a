"""``sie-config``'s configuration: the public service's ``SIE_*`` variables, overridden by flags."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from sie.settings import PACKAGED_BUNDLES_DIR, PACKAGED_MODELS_DIR, split_csv


class ConfigServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SIE_", extra="ignore")

    host: str = Field("0.0.0.0", description="Interface to listen on (--host).")
    port: int = Field(8080, ge=0, le=65535, description="TCP port (--port).")
    config_store_dir: str | None = Field(
        None, description="Where API-added configs and the epoch live: a folder, s3://... or gs://..."
    )
    config_restore: bool = Field(False, description="Load the store's models back at start.")
    nats_url: str | None = Field(None, description="NATS server(s) the deltas are published to.")
    admin_token: str | None = Field(None, description="Bearer token for writes (and every read).")
    config_read_token: str | None = Field(None, description="Bearer token for reads, export included.")
    auth_token: str | None = Field(None, description="The inference token: reads except the export.")
    models_dir: Path = Field(PACKAGED_MODELS_DIR, description="The catalogue baked into the image.")
    bundles_dir: Path = Field(PACKAGED_BUNDLES_DIR, description="Bundle YAMLs.")
    deployment_env: str = Field(
        "",
        validation_alias=AliasChoices("SIE_DEPLOYMENT_ENV", "SIE_ENV"),
        description="prod or production: refuse to start with no token (an open config service).",
    )
    log_json: bool = Field(False, description="One JSON object per log line.")
    log_level: str = Field("INFO", description="Log level.")

    def nats_servers(self) -> list[str]:
        return split_csv(self.nats_url)
