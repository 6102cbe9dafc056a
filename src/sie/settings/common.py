"""The ``SIE_*`` variables more than one process reads, each defined once as a group that the
processes' settings classes (``server``, ``gateway``, ``control``) are composed of.

Names, defaults and meanings follow the public SIE, so a deployment's environment carries over.
Tokens are ``SecretStr``: a settings object printed or logged shows ``**********``. Only composition
roots read settings; a component gets the small value it needs.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from sie.catalog.admission import RequestLimits
from sie.catalog.follower import FollowerSettings
from sie.http.auth import AuthConfig, AuthMode
from sie.queue.access import NatsAccess
from sie.queue.contract import STREAM_MAX_AGE_S

log = logging.getLogger(__name__)

PACKAGED_MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
PACKAGED_BUNDLES_DIR = Path(__file__).resolve().parent.parent / "bundles"


def split_csv(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def secret(value: SecretStr | None) -> str | None:
    return None if value is None else value.get_secret_value()


def warn_without_effect(
    named: Iterable[tuple[str, bool]], why: str, logger: logging.Logger = log
) -> list[str]:
    """One warning for the public variables a deployment set that our design makes moot: ``named``
    pairs each name with whether it is set to something that would matter, ``why`` says why it does
    not here. Silence would let an operator believe the setting took; an error would stop a
    deployment that carried the public chart's environment over. The line comes from ``logger`` (the
    process's component). Returns the names warned about."""
    names = [name for name, applies in named if applies]
    if names:
        logger.warning("%s: no effect here; %s", " and ".join(names), why)
    return names


class SieSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SIE_", extra="ignore")


class Logging(SieSettings):
    log_json: bool = Field(False, description="One JSON object per log line.")
    log_level: str = Field("INFO", description="Log level (CLI -v sets DEBUG).")


class Tracing(SieSettings):
    tracing_enabled: bool = Field(
        False, description="Export OpenTelemetry spans over OTLP (the OTEL_* variables say where)."
    )


class Catalogue(SieSettings):
    models_dir: str = Field(
        str(PACKAGED_MODELS_DIR),
        description="Folder of model YAML files, or an s3:// or gs:// prefix holding them (read at startup).",
    )
    bundles_dir: Path = Field(PACKAGED_BUNDLES_DIR, description="Folder of bundle YAML files.")
    max_item_text_bytes: int = Field(
        2 * 1024 * 1024, ge=1, description="Largest text of one item (413 beyond)."
    )
    # One value for the server and the gateway (the public gateway took 256 MiB): a body the server
    # would refuse is not one the cluster should hold in memory and fan out either.
    max_request_body_bytes: int = Field(
        34 * 1024 * 1024, ge=1, description="Largest request body (413 beyond)."
    )
    max_items_per_request: int = Field(
        512, ge=1, description="Most items in one request (400 beyond), counted before anything is decoded."
    )

    def request_limits(self) -> RequestLimits:
        return RequestLimits(self.max_item_text_bytes, self.max_items_per_request)


class Nats(SieSettings):
    """NATS and this process's credentials to it: the chart gives gateways, workers and sie-config a
    user each, whose permissions say what the role may publish and read (``sie.queue.roles``)."""

    nats_url: str | None = Field(None, description="NATS server(s), comma-separated.")
    nats_user: str | None = Field(None, description="NATS user name.")
    nats_password: SecretStr | None = Field(None, description="NATS password of SIE_NATS_USER.")
    nats_token: SecretStr | None = Field(None, description="NATS authentication token.")
    nats_creds: Path | None = Field(None, description="NATS credentials file (a JWT and its NKey seed).")
    nats_nkey_seed: Path | None = Field(None, description="File holding this process's NKey seed.")
    nats_tls_ca: Path | None = Field(
        None, description="CA bundle that signed the NATS servers' certificates."
    )
    nats_tls_cert: Path | None = Field(None, description="Client certificate for NATS mutual TLS.")
    nats_tls_key: Path | None = Field(None, description="Key of SIE_NATS_TLS_CERT.")

    def nats_servers(self) -> list[str]:
        return split_csv(self.nats_url)

    def nats_access(self) -> NatsAccess:
        return NatsAccess(
            self.nats_servers(),
            self.nats_user,
            secret(self.nats_password),
            secret(self.nats_token),
            self.nats_creds,
            self.nats_nkey_seed,
            self.nats_tls_ca,
            self.nats_tls_cert,
            self.nats_tls_key,
        )


class Tokens(SieSettings):
    auth_token: SecretStr | None = Field(
        None,
        description="The inference bearer token (a worker's to the gateway; sie-config's reads, but not "
        "its export, while no SIE_CONFIG_READ_TOKEN is set).",
    )
    admin_token: SecretStr | None = Field(None, description="Bearer token for pool and config mutations.")
    config_read_token: SecretStr | None = Field(
        None,
        description="Bearer token for sie-config's reads and /metrics (the admin token reads too); once "
        "set, SIE_AUTH_TOKEN no longer reads configs and /metrics needs a token. Followers send it.",
    )


class Auth(Tokens):
    """Bearer auth at an HTTP edge (``sie.http.auth``): the gateway's, and the server's own API."""

    auth_mode: AuthMode = Field(
        AuthMode.NONE,
        description="none, or token (alias static): bearer tokens. Anything else refuses to start.",
    )
    auth_tokens: str | None = Field(None, description="Accepted client bearer tokens, comma-separated.")
    auth_pool_tokens: str | None = Field(
        None, description="Client tokens that may also lease pools (each owns the pools it creates)."
    )
    auth_exempt_operational: bool = Field(
        False, description="Leave /, /health, /metrics and the status sockets open."
    )

    @field_validator("auth_mode", mode="before")
    @classmethod
    def _spelled(cls, value: Any) -> Any:
        """``" Token"`` is ``token``; ``tokens`` or ``bearer`` stay unknown and refuse the start."""
        return value.strip().lower() if isinstance(value, str) else value

    def tokens(self) -> list[str]:
        """The accepted client tokens: ``SIE_AUTH_TOKENS``, else ``SIE_AUTH_TOKEN``."""
        return split_csv(self.auth_tokens) or split_csv(secret(self.auth_token))

    def auth_config(self) -> AuthConfig:
        tokens, pool_tokens = self.tokens(), split_csv(self.auth_pool_tokens)
        if self.auth_mode is AuthMode.NONE and (self.auth_tokens or pool_tokens):
            log.warning(
                "SIE_AUTH_TOKENS is set but SIE_AUTH_MODE is none: this process serves everyone "
                "without a token (set SIE_AUTH_MODE=token to require one)"
            )
        return AuthConfig(
            self.auth_mode, tokens, secret(self.admin_token), self.auth_exempt_operational, pool_tokens
        )


class Follower(Tokens):
    """A process that serves sie-config's models: where the service is and whose deltas to trust."""

    config_service_url: str | None = Field(
        None, description="sie-config's URL: models added there are served here without a restart."
    )
    nats_config_trusted_producers: str = Field(
        "sie-config",
        description="Producer ids (or id prefixes before '-') whose config deltas make this process "
        "read sie-config's epoch now (and its export if it moved); a delta's body is never applied.",
    )
    nats_config_trust_any_producer: bool = Field(
        False, description="Any config delta makes this process read sie-config's epoch now."
    )

    def follower(self, poll_interval_ms: float, full_export_interval_ms: float) -> FollowerSettings | None:
        """The follower this process runs, with its own poll periods; None without a config service."""
        if not self.config_service_url:
            return None
        producers = split_csv(self.nats_config_trusted_producers)
        return FollowerSettings(
            self.config_service_url,
            secret(self.config_read_token or self.admin_token),
            poll_interval_ms / 1000,
            full_export_interval_ms / 1000,
            producers,
            self.nats_config_trust_any_producer,
        )


class Cluster(Nats, Follower):
    """What a gateway and a worker share about the queue beside NATS itself."""

    payload_store_url: str | None = Field(
        None, description="Store for items over 1 MiB: a shared folder, s3://bucket/prefix or gs://..."
    )
    health_publish_interval_ms: float = Field(
        5000, gt=0, description="Workers' heartbeat period on sie.health.{worker_id}."
    )
    stream_max_age_s: float = Field(
        STREAM_MAX_AGE_S,
        gt=0,
        description="Max age of a pool's work stream when this process creates it (gateways and workers "
        "create it alike; an existing stream keeps its own).",
    )
    stream_replicas: int = Field(
        1,
        ge=1,
        le=5,
        description="Copies JetStream keeps of every stream and bucket this process creates (work streams, "
        "DEAD_LETTERS, sie_pools): 3 on a three-node NATS cluster, so a node's loss loses nothing queued; "
        "an existing one with fewer is raised, never lowered.",
    )


class Host(BaseSettings):
    """The pod or host this process runs on, as Kubernetes and the shell name it (no ``SIE_`` prefix)."""

    model_config = SettingsConfigDict(extra="ignore")

    hostname: str = Field(default="", validation_alias=AliasChoices("HOSTNAME"))
    pod_name: str = Field(default="", validation_alias=AliasChoices("POD_NAME"))

    def name(self) -> str:
        """``HOSTNAME``, then ``POD_NAME``, then what the system calls the host."""
        return self.hostname or self.pod_name or socket.gethostname()
