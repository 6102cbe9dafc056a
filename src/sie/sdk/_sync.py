"""``SIEClient``: the blocking client, over ``httpx.Client``.

Only sending and sleeping live here; building, retry decisions and decoding come from ``BaseClient``,
so this file and ``_async.py`` differ only where the I/O does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Self, overload

import httpx

from sie.sdk._base import BaseClient, PreparedCall
from sie.sdk._decode import model_info, model_list
from sie.sdk._retry import RESOURCE_EXHAUSTED_MAX_RETRIES, RetryPolicy
from sie.sdk._types import EncodeResult, ExtractResult, Item, ModelInfo, OutputType, ScoreResult


class SIEClient(BaseClient):
    """Blocking client for an SIE server or gateway.

    Args:
        base_url: e.g. ``"http://localhost:8080"``; ``SIE_BASE_URL`` when omitted.
        timeout_s: one limit, in seconds, for connecting and for waiting on each attempt's answer.
        api_key: sent as ``Authorization: Bearer``; ``SIE_API_KEY`` is used only for ``SIE_BASE_URL``.
        gpu: default machine profile (``"l4"``) or ``"pool/l4"``; each call can override it.
        options: default runtime options, merged under each call's ``options``.
        max_connections: the connection pool's size (httpx's default when omitted).
        connect_timeout_s / read_timeout_s: the two halves of ``timeout_s`` (10 s and 150 s by default).
        http_client: an ``httpx.Client`` to send with (custom transport, proxy, TLS); the SDK closes it.
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        timeout_s: float | None = None,
        api_key: str | None = None,
        gpu: str | None = None,
        options: dict[str, Any] | None = None,
        max_connections: int | None = None,
        connect_timeout_s: float | None = None,
        read_timeout_s: float | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        super().__init__(
            base_url,
            timeout_s=timeout_s,
            api_key=api_key,
            gpu=gpu,
            options=options,
            connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s,
        )
        if http_client is None:
            http_client = httpx.Client(timeout=self._timeout(), limits=self._limits(max_connections))
        self._client = http_client
        self._sleep: Callable[[float], None] = time.sleep

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *args: object) -> None:
        self.close()

    def _send(self, call: PreparedCall, policy: RetryPolicy) -> httpx.Response:
        """POST until the policy calls an answer final; it raises when the call must fail."""
        start = self._clock()
        while True:
            cap = policy.attempt_cap(self._clock() - start)
            try:
                response = self._client.post(
                    self._url(call.path), content=call.body, headers=call.headers, timeout=self._timeout(cap)
                )
            except httpx.TransportError as error:
                delay = policy.after_transport_error(error, self._clock() - start)
                if delay is None:
                    raise self._connection_error(error) from error
            else:
                delay = self._retry_delay(policy, response, self._clock() - start)
                if delay is None:
                    return response
            self._sleep(delay)

    def _get(self, path: str) -> httpx.Response:
        try:
            return self._client.get(self._url(path), headers=self._json_headers())
        except httpx.TransportError as error:
            raise self._connection_error(error) from error

    @overload
    def encode(
        self,
        model: str,
        items: Item,
        *,
        output_types: Sequence[OutputType] | None = None,
        instruction: str | None = None,
        output_dtype: str | None = None,
        is_query: bool | None = None,
        options: dict[str, Any] | None = None,
        gpu: str | None = None,
        wait_for_capacity: bool = True,
        provision_timeout_s: float | None = None,
        max_oom_retries: int = RESOURCE_EXHAUSTED_MAX_RETRIES,
    ) -> EncodeResult: ...
    @overload
    def encode(
        self,
        model: str,
        items: list[Item],
        *,
        output_types: Sequence[OutputType] | None = None,
        instruction: str | None = None,
        output_dtype: str | None = None,
        is_query: bool | None = None,
        options: dict[str, Any] | None = None,
        gpu: str | None = None,
        wait_for_capacity: bool = True,
        provision_timeout_s: float | None = None,
        max_oom_retries: int = RESOURCE_EXHAUSTED_MAX_RETRIES,
    ) -> list[EncodeResult]: ...
    def encode(
        self,
        model: str,
        items: Item | list[Item],
        *,
        output_types: Sequence[OutputType] | None = None,
        instruction: str | None = None,
        output_dtype: str | None = None,
        is_query: bool | None = None,
        options: dict[str, Any] | None = None,
        gpu: str | None = None,
        wait_for_capacity: bool = True,
        provision_timeout_s: float | None = None,
        max_oom_retries: int = RESOURCE_EXHAUSTED_MAX_RETRIES,
    ) -> EncodeResult | list[EncodeResult]:
        """Vectors for one item (returns one result) or a list of items (returns a list)."""
        call = self._encode_call(
            model,
            items,
            output_types=output_types,
            instruction=instruction,
            output_dtype=output_dtype,
            is_query=is_query,
            options=options,
            gpu=gpu,
        )
        policy = self._policy(call, wait_for_capacity, provision_timeout_s, max_oom_retries)
        return self._encode_output(self._send(call, policy), call)

    def score(
        self,
        model: str,
        query: Item,
        items: list[Item],
        *,
        instruction: str | None = None,
        options: dict[str, Any] | None = None,
        gpu: str | None = None,
        wait_for_capacity: bool = True,
        provision_timeout_s: float | None = None,
        max_oom_retries: int = RESOURCE_EXHAUSTED_MAX_RETRIES,
    ) -> ScoreResult:
        """Relevance of each item to ``query``, best first (rank 0)."""
        call = self._score_call(model, query, items, instruction=instruction, options=options, gpu=gpu)
        policy = self._policy(call, wait_for_capacity, provision_timeout_s, max_oom_retries)
        return self._score_output(self._send(call, policy), call)

    @overload
    def extract(
        self,
        model: str,
        items: Item,
        *,
        labels: Sequence[str] | None = None,
        output_schema: dict[str, Any] | None = None,
        instruction: str | None = None,
        options: dict[str, Any] | None = None,
        gpu: str | None = None,
        wait_for_capacity: bool = True,
        provision_timeout_s: float | None = None,
        max_oom_retries: int = RESOURCE_EXHAUSTED_MAX_RETRIES,
    ) -> ExtractResult: ...
    @overload
    def extract(
        self,
        model: str,
        items: list[Item],
        *,
        labels: Sequence[str] | None = None,
        output_schema: dict[str, Any] | None = None,
        instruction: str | None = None,
        options: dict[str, Any] | None = None,
        gpu: str | None = None,
        wait_for_capacity: bool = True,
        provision_timeout_s: float | None = None,
        max_oom_retries: int = RESOURCE_EXHAUSTED_MAX_RETRIES,
    ) -> list[ExtractResult]: ...
    def extract(
        self,
        model: str,
        items: Item | list[Item],
        *,
        labels: Sequence[str] | None = None,
        output_schema: dict[str, Any] | None = None,
        instruction: str | None = None,
        options: dict[str, Any] | None = None,
        gpu: str | None = None,
        wait_for_capacity: bool = True,
        provision_timeout_s: float | None = None,
        max_oom_retries: int = RESOURCE_EXHAUSTED_MAX_RETRIES,
    ) -> ExtractResult | list[ExtractResult]:
        """Entities, relations, classes, objects or structured data; one result per item."""
        call = self._extract_call(
            model,
            items,
            labels=labels,
            output_schema=output_schema,
            instruction=instruction,
            options=options,
            gpu=gpu,
        )
        policy = self._policy(call, wait_for_capacity, provision_timeout_s, max_oom_retries)
        return self._extract_output(self._send(call, policy), call)

    def list_models(self) -> list[ModelInfo]:
        """Every configured model (``GET /v1/models``); not retried."""
        return model_list(self._get("/v1/models"))

    def get_model(self, model: str) -> ModelInfo:
        """One model's info; an unknown model raises ``RequestError`` with code ``MODEL_NOT_FOUND``."""
        return model_info(self._get(f"/v1/models/{model}"), model)
