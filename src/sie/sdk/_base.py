"""Everything the two clients share, none of it I/O: URLs, headers, bodies, decoding and error mapping.

As in httpx, ``SIEClient`` and ``SIEAsyncClient`` only add the sending (and the sleeping between
tries); every decision about what goes on the wire and what comes back is made here, once. Request
bodies are msgpack with the same keys, in the same order, as the public ``sie-sdk`` sends them, so
a server sees no difference between the two SDKs.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

import httpx
import msgpack

from sie import __version__
from sie.sdk._decode import (
    check_count,
    decode_body,
    encode_results,
    error_code,
    extract_results,
    raise_for_error,
    request_metadata,
    score_result,
)
from sie.sdk._errors import SIEConnectionError
from sie.sdk._fields import given
from sie.sdk._media import prepare_item
from sie.sdk._retry import (
    DEFAULT_PROVISION_TIMEOUT_S,
    RetryLimits,
    RetryPolicy,
    downward_jitter,
    parse_retry_after,
)
from sie.sdk._types import EncodeResult, ExtractResult, RequestMetadata, RequestUsage, ScoreResult
from sie.wire.arrays import numpy_default

logger = logging.getLogger("sie.sdk")

MSGPACK: Final = "application/msgpack"
JSON: Final = "application/json"
SDK_VERSION_HEADER: Final = "X-SIE-SDK-Version"
SERVER_VERSION_HEADER: Final = "X-SIE-Server-Version"
PROFILE_HEADER: Final = "X-SIE-MACHINE-PROFILE"
POOL_HEADER: Final = "X-SIE-Pool"
DEFAULT_CONNECT_TIMEOUT_S: Final = 10.0
# Longer than a gateway's 120 s request deadline, so its typed 504 arrives before we give up.
DEFAULT_READ_TIMEOUT_S: Final = 150.0
BASE_URL_ENV: Final = "SIE_BASE_URL"
API_KEY_ENV: Final = "SIE_API_KEY"


@dataclass(frozen=True, slots=True)
class PreparedCall:
    """One POST, built once and sent as many times as the retry policy asks."""

    operation: str
    model: str
    body: bytes
    headers: dict[str, str]
    gpu: str | None
    lora: str | None
    single: bool
    item_count: int
    route: str | None = None  # a path of its own (the OpenAI routes name the model in the body)

    @property
    def path(self) -> str:
        # Model ids such as "BAAI/bge-m3" go into the path as they are: the server routes {model:path}.
        return self.route or f"/v1/{self.operation}/{self.model}"


def version_skew(sdk_version: str, server_version: str) -> str | None:
    """A warning when the versions are too far apart to trust the wire: another major, or minors > 1 apart."""
    try:
        sdk_major, sdk_minor = (int(part) for part in sdk_version.split(".")[:2])
        server_major, server_minor = (int(part) for part in server_version.split(".")[:2])
    except ValueError:
        return None  # "unknown", a dev build, or anything not semver: nothing to compare
    if sdk_major != server_major:
        return f"SDK version {sdk_version} has a different major version than server {server_version}"
    if abs(sdk_minor - server_minor) > 1:
        return f"SDK version {sdk_version} is more than one minor version away from server {server_version}"
    return None


def split_gpu(gpu: str) -> tuple[str | None, str]:
    """``"pool/l4"`` → ``("pool", "l4")``; ``"l4"`` → ``(None, "l4")``."""
    pool, sep, profile = gpu.partition("/")
    return (pool, profile) if sep else (None, gpu)


def _origin(url: str) -> tuple[str, str, int | None]:
    parsed = httpx.URL(url)
    return parsed.scheme, parsed.host, parsed.port


def resolve_endpoint(base_url: str | None, api_key: str | None) -> tuple[str, str | None]:
    """The base URL and key to use, falling back to ``SIE_BASE_URL`` / ``SIE_API_KEY``.

    The environment key is sent only to the environment's own origin, so pointing a client at some
    other server never leaks it there.
    """
    env_url = os.environ.get(BASE_URL_ENV, "").strip()
    url = base_url if base_url is not None else env_url
    if not url:
        raise ValueError(f"base_url is required: pass it, or set {BASE_URL_ENV}")
    if api_key is None and env_url and _origin(url) == _origin(env_url):
        api_key = os.environ.get(API_KEY_ENV, "").strip() or None
    return url.rstrip("/"), api_key


class BaseClient:
    """Configuration, request building and response decoding for both clients."""

    # The skew check runs once per process, whichever client meets a server first.
    _version_checked: ClassVar[bool] = False

    def __init__(
        self,
        base_url: str | None,
        *,
        timeout_s: float | None,
        api_key: str | None,
        gpu: str | None,
        options: dict[str, Any] | None,
        connect_timeout_s: float | None,
        read_timeout_s: float | None,
    ) -> None:
        self._base_url, api_key = resolve_endpoint(base_url, api_key)
        self._connect_timeout = connect_timeout_s or timeout_s or DEFAULT_CONNECT_TIMEOUT_S
        self._read_timeout = read_timeout_s or timeout_s or DEFAULT_READ_TIMEOUT_S
        self._default_gpu = gpu
        self._default_options = options
        self._headers = {"Content-Type": MSGPACK, "Accept": MSGPACK, SDK_VERSION_HEADER: __version__}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        # Test seams: the retry loops read time and jitter only through these (and ``_sleep``).
        self._clock: Callable[[], float] = time.monotonic
        self._jitter: Callable[[float], float] = downward_jitter

    @property
    def base_url(self) -> str:
        return self._base_url

    def _url(self, path: str) -> str:
        return f"{self._base_url}{path}"

    def _timeout(self, cap: float = float("inf")) -> httpx.Timeout:
        """This attempt's timeouts, never longer than what is left of the call's budget."""
        return httpx.Timeout(min(self._read_timeout, cap), connect=min(self._connect_timeout, cap))

    @staticmethod
    def _limits(max_connections: int | None) -> httpx.Limits:
        if max_connections is None:  # httpx's own defaults (its ``Limits()`` would mean unlimited)
            return httpx.Limits(max_connections=100, max_keepalive_connections=20)
        return httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)

    def _json_headers(self) -> dict[str, str]:
        return {**self._headers, "Accept": JSON}

    # -- request building -------------------------------------------------------------------------

    def _options(self, options: dict[str, Any] | None, is_query: bool | None = None) -> dict[str, Any] | None:
        """Client-level options under per-call ones (per-call wins); ``is_query`` travels in options."""
        merged = options if self._default_options is None else {**self._default_options, **(options or {})}
        if is_query is not None:
            merged = {**(merged or {}), "is_query": is_query}
        return merged

    def _prepare(
        self,
        operation: str,
        model: str,
        body: dict[str, Any],
        options: dict[str, Any] | None,
        gpu: str | None,
        single: bool,
        item_count: int,
    ) -> PreparedCall:
        headers, profile = self._routed(dict(self._headers), gpu)
        lora = (options or {}).get("lora_id") or (options or {}).get("lora")
        return PreparedCall(
            operation=operation,
            model=model,
            body=msgpack.packb(body, use_bin_type=True, default=numpy_default),
            headers=headers,
            gpu=profile or None,
            lora=str(lora) if lora else None,
            single=single,
            item_count=item_count,
        )

    def _routed(self, headers: dict[str, str], gpu: str | None) -> tuple[dict[str, str], str | None]:
        """``headers`` with the machine profile and pool a call asks for (its own, else the client's)."""
        profile = gpu if gpu is not None else self._default_gpu
        if profile:
            pool, profile = split_gpu(profile)
            headers[PROFILE_HEADER] = profile
            if pool:
                headers[POOL_HEADER] = pool
        return headers, profile

    def _items_call(
        self, operation: str, model: str, items: Any, params: dict[str, Any], gpu: str | None
    ) -> PreparedCall:
        """``{"items": [...]}``, plus ``params`` holding only what the caller actually set."""
        single = not isinstance(items, list)
        wire_items = [prepare_item(item) for item in ([items] if single else items)]
        body: dict[str, Any] = {"items": wire_items}
        set_params = given(params)
        if set_params:
            body["params"] = set_params
        return self._prepare(operation, model, body, params.get("options"), gpu, single, len(wire_items))

    def _encode_call(
        self,
        model: str,
        items: Any,
        *,
        output_types: Sequence[str] | None,
        instruction: str | None,
        output_dtype: str | None,
        is_query: bool | None,
        options: dict[str, Any] | None,
        gpu: str | None,
    ) -> PreparedCall:
        params = {
            "output_types": list(output_types) if output_types is not None else None,
            "instruction": instruction,
            "output_dtype": output_dtype,
            "options": self._options(options, is_query),
        }
        return self._items_call("encode", model, items, params, gpu)

    def _score_call(
        self,
        model: str,
        query: Any,
        items: list[Any],
        *,
        instruction: str | None,
        options: dict[str, Any] | None,
        gpu: str | None,
    ) -> PreparedCall:
        """Score has no ``params`` wrapper: query, items, instruction and options sit at the top."""
        body: dict[str, Any] = {"query": prepare_item(query), "items": [prepare_item(item) for item in items]}
        resolved = self._options(options)
        if instruction is not None:
            body["instruction"] = instruction
        if resolved is not None:
            body["options"] = resolved
        return self._prepare("score", model, body, resolved, gpu, True, len(items))

    def _extract_call(
        self,
        model: str,
        items: Any,
        *,
        labels: Sequence[str] | None,
        output_schema: dict[str, Any] | None,
        instruction: str | None,
        options: dict[str, Any] | None,
        gpu: str | None,
    ) -> PreparedCall:
        params = {
            "labels": list(labels) if labels is not None else None,
            "output_schema": output_schema,
            "instruction": instruction,
            "options": self._options(options),
        }
        return self._items_call("extract", model, items, params, gpu)

    # -- retrying and reading answers -------------------------------------------------------------

    def _json_call(
        self, route: str, model: str, body: dict[str, Any], gpu: str | None, *, stream: bool = False
    ) -> PreparedCall:
        """A JSON POST of the generation routes (``_generation.py`` builds the bodies); its retry policy
        treats it as not idempotent (``operation`` "generate")."""
        accept = "text/event-stream" if stream else JSON
        headers, profile = self._routed({**self._headers, "Content-Type": JSON, "Accept": accept}, gpu)
        content = json.dumps(body).encode()
        return PreparedCall("generate", model, content, headers, profile or None, None, True, 1, route)

    def _policy(
        self,
        call: PreparedCall,
        wait_for_capacity: bool,
        provision_timeout_s: float | None,
        max_oom_retries: int,
    ) -> RetryPolicy:
        budget = DEFAULT_PROVISION_TIMEOUT_S if provision_timeout_s is None else provision_timeout_s
        limits = RetryLimits(
            wait_for_capacity, budget, max_oom_retries, idempotent=call.operation != "generate"
        )
        return RetryPolicy(limits, model=call.model, gpu=call.gpu, lora=call.lora, jitter=self._jitter)

    @staticmethod
    def _retry_delay(policy: RetryPolicy, response: httpx.Response, elapsed: float) -> float | None:
        code = error_code(response) if response.status_code >= 400 else None
        return policy.after_response(response.status_code, code, parse_retry_after(response.headers), elapsed)

    def _connection_error(self, error: httpx.TransportError) -> SIEConnectionError:
        if isinstance(error, httpx.ReadTimeout):
            return SIEConnectionError(
                f"Request to {self._base_url} timed out waiting for the response; not retried because the "
                f"server may still be working on it (raise read_timeout_s for slow calls): {error}"
            )
        return SIEConnectionError(f"Failed to talk to {self._base_url} ({type(error).__name__}): {error}")

    def _read(self, response: httpx.Response, call: PreparedCall) -> dict[str, Any]:
        """The decoded body of a call's final answer, or the SDK error that answer stands for."""
        raise_for_error(response, call.model)
        self._check_server_version(response)
        return decode_body(response, call.operation)

    def _encode_output(
        self, response: httpx.Response, call: PreparedCall
    ) -> EncodeResult | list[EncodeResult]:
        results = encode_results(self._read(response, call))
        check_count(len(results), call.item_count, call.model, "encode")
        _attach_metadata(results, response)
        return results[0] if call.single else results

    def _score_output(self, response: httpx.Response, call: PreparedCall) -> ScoreResult:
        result = score_result(self._read(response, call))
        _attach_metadata([result], response)
        return result

    def _extract_output(
        self, response: httpx.Response, call: PreparedCall
    ) -> ExtractResult | list[ExtractResult]:
        results = extract_results(self._read(response, call))
        check_count(len(results), call.item_count, call.model, "extract")
        _attach_metadata(results, response)
        return results[0] if call.single else results

    def _check_server_version(self, response: httpx.Response) -> None:
        server_version = response.headers.get(SERVER_VERSION_HEADER)
        if not server_version or BaseClient._version_checked:
            return
        BaseClient._version_checked = True
        warning = version_skew(__version__, server_version)
        if warning:
            logger.warning("%s; upgrade the older side", warning)


def _attach_metadata(
    results: Sequence[EncodeResult | ScoreResult | ExtractResult], response: httpx.Response
) -> None:
    """The response's ``request`` metadata, one dict per result, as the public SDK attaches it."""
    metadata = request_metadata(response.headers)
    if metadata:
        for result in results:
            detached = RequestMetadata(**metadata)
            if "usage" in metadata:  # each result its own copy, as the public SDK detaches it
                detached["usage"] = RequestUsage(**metadata["usage"])
            result["request"] = detached
