"""``SIEAsyncClient``: the asyncio client, over ``httpx.AsyncClient``.

A line-for-line twin of ``_sync.py`` except for ``await``, ``asyncio.sleep`` and the optional
``max_concurrency`` semaphore; everything else comes from ``BaseClient``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Self, overload

import httpx

from sie.sdk._base import BaseClient, PreparedCall
from sie.sdk._decode import model_info, model_list
from sie.sdk._retry import RESOURCE_EXHAUSTED_MAX_RETRIES, RetryPolicy
from sie.sdk._types import EncodeResult, ExtractResult, Item, ModelInfo, OutputType, ScoreResult


class SIEAsyncClient(BaseClient):
    """Asyncio client for an SIE server or gateway; the same calls as ``SIEClient``, awaited.

    Args:
        base_url: e.g. ``"http://localhost:8080"``; ``SIE_BASE_URL`` when omitted.
        timeout_s: one limit, in seconds, for connecting and for waiting on each attempt's answer.
        api_key: sent as ``Authorization: Bearer``; ``SIE_API_KEY`` is used only for ``SIE_BASE_URL``.
        gpu: default machine profile (``"l4"``) or ``"pool/l4"``; each call can override it.
        options: default runtime options, merged under each call's ``options``.
        max_connections: the connection pool's size (httpx's default when omitted).
        max_concurrency: at most this many requests in flight from this client (unbounded when omitted).
        connect_timeout_s / read_timeout_s: the two halves of ``timeout_s`` (10 s and 150 s by default).
        http_client: an ``httpx.AsyncClient`` to send with (custom transport, proxy, TLS); the SDK closes it.
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
        max_concurrency: int | None = None,
        connect_timeout_s: float | None = None,
        read_timeout_s: float | None = None,
        http_client: httpx.AsyncClient | None = None,
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
            http_client = httpx.AsyncClient(timeout=self._timeout(), limits=self._limits(max_connections))
        self._client = http_client
        self._sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        # Bounds requests in flight, not calls: a call sleeping between retries holds no slot.
        self._throttle: contextlib.AbstractAsyncContextManager[Any] = (
            asyncio.Semaphore(max_concurrency) if max_concurrency is not None else contextlib.nullcontext()
        )

    async def close(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *args: object) -> None:
        await self.close()

    async def _send(self, call: PreparedCall, policy: RetryPolicy) -> httpx.Response:
        """POST until the policy calls an answer final; it raises when the call must fail."""
        start = self._clock()
        while True:
            cap = policy.attempt_cap(self._clock() - start)
            try:
                async with self._throttle:
                    response = await self._client.post(
                        self._url(call.path),
                        content=call.body,
                        headers=call.headers,
                        timeout=self._timeout(cap),
                    )
            except httpx.TransportError as error:
                delay = policy.after_transport_error(error, self._clock() - start)
                if delay is None:
                    raise self._connection_error(error) from error
            else:
                delay = self._retry_delay(policy, response, self._clock() - start)
                if delay is None:
                    return response
            await self._sleep(delay)

    async def _get(self, path: str) -> httpx.Response:
        try:
            async with self._throttle:
                return await self._client.get(self._url(path), headers=self._json_headers())
        except httpx.TransportError as error:
            raise self._connection_error(error) from error

    @overload
    async def encode(
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
    async def encode(
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
    async def encode(
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
        return self._encode_output(await self._send(call, policy), call)

    async def score(
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
        return self._score_output(await self._send(call, policy), call)

    @overload
    async def extract(
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
    async def extract(
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
    async def extract(
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
        return self._extract_output(await self._send(call, policy), call)

    async def list_models(self) -> list[ModelInfo]:
        """Every configured model (``GET /v1/models``); not retried."""
        return model_list(await self._get("/v1/models"))

    async def get_model(self, model: str) -> ModelInfo:
        """One model's info; an unknown model raises ``RequestError`` with code ``MODEL_NOT_FOUND``."""
        return model_info(await self._get(f"/v1/models/{model}"), model)
