"""The operator's upstreams file (``--upstreams-file`` / ``SIE_UPSTREAMS_FILE``), in the public format.

An upstream is a named endpoint outside this deployment that remote profiles call. It is defined only
here, at startup, never through a model config or a request: a model's remote profile names it, and
the URL it is sent to comes from this file alone. Its credential is the *name* of an environment
variable, read on every call, so no parsed object holds the key and a key never sits in the file.

Only kind ``openai`` (an OpenAI-compatible ``/embeddings`` and Cohere-shape ``/rerank``) is served;
kind ``sie`` parses, and a profile on one is refused when a request reaches it
(``sie.upstream.pool``). ``equivalence`` parses and is not read (docs: remote serving).

Messages never repeat an offending value: a rejected URL or a literal key must not reach a log.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import math
import os
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sie.catalog.model_config import UPSTREAM_NAME

UPSTREAMS_FILE_ENV: Final = "SIE_UPSTREAMS_FILE"
REMOTE_SERVING_ENV: Final = "SIE_REMOTE_SERVING"

_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_VISIBLE_ASCII: Final = re.compile(r"[\x21-\x7e]+")
_PARAM_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_MAX_PARAMS: Final = 32
_MAX_SET_PARAMS_BYTES: Final = 16 << 10
_MAX_FILE_BYTES: Final = 1 << 20
# Fields this server fills itself from the request: an operator can neither set nor strip them.
RESERVED_PARAMS: Final = frozenset(
    {"documents", "encoding_format", "input", "messages", "model", "n", "prompt", "query", "stream", "top_n"}
)


class UpstreamConfigError(ValueError):
    """The upstreams file, or one upstream in it, is invalid."""


class UpstreamCredentialError(RuntimeError):
    """The environment variable an upstream names for its key is unset or holds a bad value."""


class UpstreamKind(StrEnum):
    OPENAI = "openai"
    SIE = "sie"


class Endpoint(StrEnum):
    """An OpenAI-compatible endpoint an upstream of kind ``openai`` offers (``completions`` and
    ``chat`` parse; this release serves no generation)."""

    COMPLETIONS = "completions"
    CHAT = "chat"
    EMBEDDINGS = "embeddings"
    RERANK = "rerank"


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str, field: str, require_tls: bool = True) -> str:
    """``url`` without its trailing slash: http(s), a host, no credentials, query or fragment, and
    https unless the host is loopback (``require_tls``)."""
    if not _VISIBLE_ASCII.fullmatch(url):
        raise UpstreamConfigError(f"{field} must be printable ASCII without spaces")
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError:
        raise UpstreamConfigError(f"{field} is not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise UpstreamConfigError(f"{field} must be an http or https URL")
    if "@" in parts.netloc or "%" in parts.netloc:
        raise UpstreamConfigError(f"{field} must not carry credentials or an encoded host")
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise UpstreamConfigError(f"{field} must not carry a query or a fragment")
    if not parts.hostname:
        raise UpstreamConfigError(f"{field} must name a host")
    if require_tls and parts.scheme == "http" and not _loopback(parts.hostname):
        raise UpstreamConfigError(f"{field} must use https outside loopback")
    return url.rstrip("/")


def _json_size(value: Any) -> int:
    try:
        return len(json.dumps(value, separators=(",", ":"), allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        raise UpstreamConfigError("set_params holds a value that is not finite JSON") from None


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class RateCap(_Frozen):
    """Per-process limits on the calls to one upstream: a call over either is refused, never queued."""

    requests_per_minute: int = Field(gt=0)
    max_concurrency: int = Field(gt=0)


class Breaker(_Frozen):
    """``failures`` unavailable answers in a row within ``window_s`` stop calls for ``cooldown_s``."""

    failures: int = Field(default=5, gt=0, le=1000)
    window_s: float = Field(default=30.0, gt=0, le=3600)
    cooldown_s: float = Field(default=60.0, gt=0, le=3600)


class Equivalence(_Frozen):
    """The public server's measured-equivalence records for hybrid routing: parsed, not read."""

    max_age_s: int = Field(gt=0, le=604_800, strict=True)
    record_files: dict[str, str] = Field(min_length=1, max_length=256)


class Upstream(_Frozen):
    kind: UpstreamKind
    base_url: str
    api_key_secret: str | None = None
    rate_cap: RateCap
    breaker: Breaker = Field(default_factory=Breaker)
    proxy_url: str | None = None
    endpoints: frozenset[Endpoint] = frozenset()
    set_params: dict[str, Any] = Field(default_factory=dict, repr=False)
    strip_params: frozenset[str] = frozenset()
    equivalence: Equivalence | None = Field(default=None, repr=False)

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        return check_url(value, "base_url")

    @field_validator("proxy_url")
    @classmethod
    def _proxy_url(cls, value: str | None) -> str | None:
        return None if value is None else check_url(value, "proxy_url", require_tls=False)

    @field_validator("api_key_secret")
    @classmethod
    def _key_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.fullmatch(value):
            raise UpstreamConfigError("api_key_secret must name an environment variable, not hold a key")
        return value

    @field_validator("set_params", "strip_params")
    @classmethod
    def _params(cls, value: Mapping[str, Any] | frozenset[str]) -> Any:
        if len(value) > _MAX_PARAMS:
            raise UpstreamConfigError(f"set_params and strip_params name at most {_MAX_PARAMS} fields each")
        for name in value:
            if not _PARAM_NAME.fullmatch(name):
                raise UpstreamConfigError("parameter names are letters, digits and underscores, at most 64")
            if name in RESERVED_PARAMS:
                raise UpstreamConfigError(
                    f"{name!r} is sent by the server itself: it cannot be set or stripped"
                )
        if isinstance(value, Mapping) and _json_size(value) > _MAX_SET_PARAMS_BYTES:
            raise UpstreamConfigError(f"set_params is larger than {_MAX_SET_PARAMS_BYTES} bytes as JSON")
        if isinstance(value, Mapping) and any(
            isinstance(v, float) and not math.isfinite(v) for v in value.values()
        ):
            raise UpstreamConfigError("set_params holds a number that is not finite")
        return value

    @model_validator(mode="after")
    def _shape(self) -> Upstream:
        # Through a proxy, plain HTTP would show the bearer token to the proxy; TLS only a tunnel.
        if self.proxy_url is not None and not self.base_url.startswith("https://"):
            raise UpstreamConfigError("proxy_url requires an https base_url")
        if self.kind is UpstreamKind.SIE:
            if self.endpoints or self.set_params or self.strip_params or self.equivalence:
                raise UpstreamConfigError(
                    "kind sie takes no endpoints, set_params, strip_params or equivalence"
                )
        elif not self.endpoints:
            raise UpstreamConfigError("kind openai must declare the endpoints it offers")
        both = sorted(self.set_params.keys() & self.strip_params)
        if both:
            raise UpstreamConfigError(f"set_params and strip_params both name {', '.join(both)}")
        return self

    def apply_params(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``body`` as sent to this upstream: the operator's fields set, then stripped."""
        sent = dict(body)
        sent.update(copy.deepcopy(self.set_params))
        for name in self.strip_params:
            sent.pop(name, None)
        return sent

    def api_key(self) -> str | None:
        """The key, read now from the variable the file names (None when it names none). Whitespace
        around it (a secret file's newline) is dropped; any other unprintable character refused."""
        if self.api_key_secret is None:
            return None
        value = os.environ.get(self.api_key_secret, "").strip()
        if not value:
            raise UpstreamCredentialError(f"environment variable {self.api_key_secret} is not set")
        if not _VISIBLE_ASCII.fullmatch(value):
            raise UpstreamCredentialError(
                f"environment variable {self.api_key_secret} holds characters a key cannot contain"
            )
        return value


class _File(_Frozen):
    upstreams: dict[str, Upstream] = Field(default_factory=dict)

    @field_validator("upstreams")
    @classmethod
    def _names(cls, value: dict[str, Upstream]) -> dict[str, Upstream]:
        if any(not UPSTREAM_NAME.fullmatch(name) for name in value):
            raise UpstreamConfigError("upstream names are lowercase letters, digits and hyphens, at most 63")
        return value


class _UniqueKeys(yaml.SafeLoader):
    """A safe loader that refuses a repeated key instead of keeping the last one silently."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str | int | float | bool) or key in seen:
                raise UpstreamConfigError(
                    f"a key is repeated or not a scalar on line {key_node.start_mark.line + 1}"
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_upstreams(path: str | Path) -> dict[str, Upstream]:
    """The upstreams the file defines, by name; ``UpstreamConfigError`` names the file and the field."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise UpstreamConfigError(f"upstreams file {path} could not be read: {exc.strerror}") from None
    if len(data) > _MAX_FILE_BYTES:
        raise UpstreamConfigError(f"upstreams file {path} is larger than {_MAX_FILE_BYTES} bytes")
    try:
        raw = yaml.load(data.decode("utf-8"), Loader=_UniqueKeys)  # a SafeLoader
    except UpstreamConfigError as exc:
        raise UpstreamConfigError(f"upstreams file {path}: {exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError):
        raise UpstreamConfigError(f"upstreams file {path} is not valid UTF-8 YAML") from None
    if raw is None:
        return {}
    try:
        parsed = _File.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'file'}: {err['msg']}"
            for err in exc.errors(include_url=False, include_input=False)
        )
        raise UpstreamConfigError(f"upstreams file {path} is invalid: {problems}") from None
    return dict(parsed.upstreams)


def remote_serving_from_env(raw: str | None) -> bool:
    """``SIE_REMOTE_SERVING`` as the public server reads it: unset is on, anything unrecognised off."""
    return raw is None or raw.strip().lower() in {"1", "true", "yes", "on"}
