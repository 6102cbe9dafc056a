"""``sie-config``'s configuration: the public service's ``SIE_*`` variables, overridden by flags; the
groups other processes share are in ``common``."""

from __future__ import annotations

from pydantic import AliasChoices, Field

from sie.settings.common import Catalogue, Logging, Nats, Tokens


class ConfigServiceSettings(Catalogue, Nats, Tokens, Logging):
    host: str = Field("0.0.0.0", description="Interface to listen on (--host).")
    port: int = Field(8080, ge=0, le=65535, description="TCP port (--port).")
    config_store_dir: str | None = Field(
        None, description="Where API-added configs and the epoch live: a folder, s3://... or gs://..."
    )
    config_restore: bool = Field(False, description="Load the store's models back at start.")
    upstream_names: str | None = Field(
        None,
        description="Comma-separated names of the upstreams the servers define (their upstreams files): "
        "a written remote profile naming another is refused 422. Unset: not checked.",
    )
    deployment_env: str = Field(
        "",
        validation_alias=AliasChoices("SIE_DEPLOYMENT_ENV", "SIE_ENV"),
        description="prod or production: refuse to start with no token (an open config service).",
    )

    def declared_upstreams(self) -> frozenset[str] | None:
        """``SIE_UPSTREAM_NAMES`` as a set (empty entries dropped); None when it is unset."""
        if self.upstream_names is None:
            return None
        return frozenset(name.strip() for name in self.upstream_names.split(",") if name.strip())
