"""``SIEAsyncClient``: the asyncio client, over ``httpx.AsyncClient``.

A line-for-line twin of ``_sync.py`` except for ``await``, ``asyncio.sleep`` and the optional
``max_concurrency`` semaphore; everything else comes from ``BaseClient``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Self, overload

import httpx

from sie.sdk._base import BaseClient, PreparedCall
from sie.sdk._capacity import (
    CAPACITY_POLL_S,
    LEASE_RENEWAL_S,
    capacity,
    check_pool,
    deleted,
    pool_body,
    pool_info,
)
from sie.sdk._decode import model_info, model_list, raise_for_error
from sie.sdk._errors import ProvisioningError, SIEError
from sie.sdk._generation import (
    CHAT_PATH,
    END,
    RESPONSES_PATH,
    chat_body,
    generate_body,
    generate_path,
    generate_result,
    responses_body,
    sse_line,
)
from sie.sdk._retry import DEFAULT_PROVISION_TIMEOUT_S, RESOURCE_EXHAUSTED_MAX_RETRIES, RetryPolicy
from sie.sdk._types import (
    CapacityInfo,
    EncodeResult,
    ExtractResult,
    GenerateChunk,
    GenerateResult,
    Item,
    ModelInfo,
    OutputType,
    PoolInfo,
    ScoreResult,
)

logger = logging.getLogger("sie.sdk")


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
        self._leases: dict[str, asyncio.Task[None]] = {}  # pool -> its renewal task
        self.lease_renewal_s = LEASE_RENEWAL_S
        # Bounds requests in flight, not calls: a call sleeping between retries holds no slot.
        self._throttle: contextlib.AbstractAsyncContextManager[Any] = (
            asyncio.Semaphore(max_concurrency) if max_concurrency is not None else contextlib.nullcontext()
        )

    async def close(self) -> None:
        leases = list(self._leases.values())
        self._leases.clear()
        for task in leases:
            task.cancel()
        await asyncio.gather(*leases, return_exceptions=True)
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
        return await self._call("GET", path)

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        try:
            async with self._throttle:
                return await self._client.request(
                    method, self._url(path), json=body, headers=self._json_headers()
                )
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

    # -- cluster capacity and pools (a gateway) ---------------------------------------------------------

    async def get_capacity(self, *, gpu: str | None = None) -> CapacityInfo:
        """Healthy workers and live machine profiles (the gateway's ``/health``); ``gpu`` filters."""
        return capacity(await self._get("/health"), gpu)

    async def wait_for_capacity(
        self,
        gpu: str | None = None,
        *,
        model: str | None = None,
        timeout_s: float | None = None,
        poll_interval_s: float = CAPACITY_POLL_S,
    ) -> CapacityInfo:
        """Until a worker of ``gpu`` (any, when None) is up. With ``model``, one warm-up encode
        (waiting through 202/503 provisioning and the model's load) is what waits."""
        budget = timeout_s if timeout_s is not None else DEFAULT_PROVISION_TIMEOUT_S
        if model is not None:
            await self.encode(
                model, Item(text="warmup"), gpu=gpu, wait_for_capacity=True, provision_timeout_s=budget
            )
            return await self.get_capacity(gpu=gpu)
        start = self._clock()
        while True:
            found = await self.get_capacity(gpu=gpu)
            if found.get("worker_count", 0) > 0:
                return found
            if self._clock() - start + poll_interval_s > budget:
                raise ProvisioningError(f"No capacity for '{gpu or 'any'}' within {budget:.0f}s", gpu=gpu)
            await self._sleep(poll_interval_s)

    async def create_pool(
        self,
        name: str,
        gpus: dict[str, int] | None = None,
        gpu_caps: dict[str, int] | None = None,
        bundle: str | None = None,
        minimum_worker_count: int | None = None,
        pinned_models: list[str] | None = None,
        *,
        queue_pool: str | None = None,
    ) -> None:
        """Create (or update and renew) a pool; its lease is renewed in the background until
        ``delete_pool`` or ``close``."""
        body = pool_body(name, gpus, gpu_caps, bundle, minimum_worker_count, pinned_models, queue_pool)
        check_pool(await self._call("POST", "/v1/pools", body), name, "create")
        if name not in self._leases:
            self._leases[name] = asyncio.create_task(self._renew(name), name=f"sie-pool-{name}")

    async def _renew(self, name: str) -> None:
        while True:
            await asyncio.sleep(self.lease_renewal_s)
            try:
                response = await self._call("POST", f"/v1/pools/{name}/renew")
                if response.status_code >= 400:
                    logger.warning("renewing pool '%s': HTTP %d", name, response.status_code)
            except SIEError as error:  # the next period tries again; the lease outlives a few misses
                logger.warning("renewing pool '%s' failed: %s", name, error)

    async def get_pool(self, name: str) -> PoolInfo | None:
        """The pool, or None when it does not exist (never created, deleted, or expired)."""
        return pool_info(await self._get(f"/v1/pools/{name}"), name)

    async def delete_pool(self, name: str) -> bool:
        """Delete the pool and stop renewing it; False when it did not exist."""
        task = self._leases.pop(name, None)
        if task is not None:
            task.cancel()
        return deleted(await self._call("DELETE", f"/v1/pools/{name}"), name)

    # -- generation ---------------------------------------------------------------------------------

    async def _stream(self, call: PreparedCall, policy: RetryPolicy) -> AsyncIterator[Any]:
        """The chunks of a streamed call; a refusal before the stream began is retried or raised as
        every call's is, an ``error`` chunk raises ``ServerError``."""
        start = self._clock()
        while True:
            cap = policy.attempt_cap(self._clock() - start)
            try:
                async with (
                    self._throttle,
                    self._client.stream(
                        "POST",
                        self._url(call.path),
                        content=call.body,
                        headers=call.headers,
                        timeout=self._timeout(cap),
                    ) as response,
                ):
                    if 200 <= response.status_code < 300 and response.status_code != 202:
                        self._check_server_version(response)
                        async for line in response.aiter_lines():
                            chunk = sse_line(line)
                            if chunk is END:
                                return
                            if chunk is not None:
                                yield chunk
                        return
                    await response.aread()
                    delay = self._retry_delay(policy, response, self._clock() - start)
                    if delay is None:
                        raise_for_error(response, call.model)
                        return  # unreachable: a final answer that is no stream raises
            except httpx.TransportError as error:
                delay = policy.after_transport_error(error, self._clock() - start)
                if delay is None:
                    raise self._connection_error(error) from error
            await self._sleep(delay)

    async def _generation_call(
        self,
        call: PreparedCall,
        wait_for_capacity: bool,
        provision_timeout_s: float | None,
        max_oom_retries: int,
    ) -> dict[str, Any]:
        policy = self._policy(call, wait_for_capacity, provision_timeout_s, max_oom_retries)
        return self._read(await self._send(call, policy), call)

    async def generate(
        self,
        model: str,
        prompt: str,
        *,
        max_new_tokens: int,
        temperature: float | None = None,
        top_p: float | None = None,
        stop: list[str] | None = None,
        frequency_penalty: float | None = None,
        presence_penalty: float | None = None,
        grammar: Mapping[str, Any] | None = None,
        seed: int | None = None,
        logit_bias: dict[str, float] | None = None,
        options: dict[str, Any] | None = None,
        gpu: str | None = None,
        wait_for_capacity: bool = True,
        provision_timeout_s: float | None = None,
        max_oom_retries: int = RESOURCE_EXHAUSTED_MAX_RETRIES,
    ) -> GenerateResult:
        """Text from ``prompt`` as it is (no chat template): ``{model, text, finish_reason, usage,
        ttft_ms, tpot_ms}``. ``grammar`` is ``{"json_schema"|"regex"|"ebnf": ..., "strict": bool}``.
        Not retried once it may have reached a generation (see ``_generation``)."""
        body = generate_body(
            prompt,
            max_new_tokens,
            stream=False,
            temperature=temperature,
            top_p=top_p,
            stop=stop,
            frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty,
            grammar=grammar,
            seed=seed,
            logit_bias=logit_bias,
            options=options,
        )
        call = self._json_call(generate_path(model), model, body, gpu)
        return generate_result(
            await self._generation_call(call, wait_for_capacity, provision_timeout_s, max_oom_retries)
        )

    def stream_generate(
        self,
        model: str,
        prompt: str,
        *,
        max_new_tokens: int,
        temperature: float | None = None,
        top_p: float | None = None,
        stop: list[str] | None = None,
        frequency_penalty: float | None = None,
        presence_penalty: float | None = None,
        grammar: Mapping[str, Any] | None = None,
        seed: int | None = None,
        logit_bias: dict[str, float] | None = None,
        logprobs: bool = False,
        top_logprobs: int | None = None,
        options: dict[str, Any] | None = None,
        gpu: str | None = None,
        wait_for_capacity: bool = True,
        provision_timeout_s: float | None = None,
        max_oom_retries: int = RESOURCE_EXHAUSTED_MAX_RETRIES,
    ) -> AsyncIterator[GenerateChunk]:
        """``generate``'s chunks as they come (``text_delta``); the last has ``done``,
        ``finish_reason``, ``usage`` and ``ttft_ms``. A failure after the stream began is a chunk with
        ``error``: it raises ``ServerError``. The request is sent when iteration starts."""
        body = generate_body(
            prompt,
            max_new_tokens,
            stream=True,
            temperature=temperature,
            top_p=top_p,
            stop=stop,
            frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty,
            grammar=grammar,
            seed=seed,
            logit_bias=logit_bias,
            options=options,
            logprobs=logprobs,
            top_logprobs=top_logprobs,
        )
        call = self._json_call(generate_path(model), model, body, gpu, stream=True)
        return self._stream(call, self._policy(call, wait_for_capacity, provision_timeout_s, max_oom_retries))

    async def chat_completions(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        gpu: str | None = None,
        extra_body: dict[str, Any] | None = None,
        wait_for_capacity: bool = True,
        provision_timeout_s: float | None = None,
        max_oom_retries: int = RESOURCE_EXHAUSTED_MAX_RETRIES,
        **fields: Any,
    ) -> dict[str, Any]:
        """An OpenAI chat completion, as its JSON: OpenAI's fields (``max_tokens``, ``temperature``,
        ``response_format``, ``tools``...) as keywords; ``extra_body`` is merged in last."""
        call = self._json_call(CHAT_PATH, model, chat_body(model, messages, False, fields, extra_body), gpu)
        return await self._generation_call(call, wait_for_capacity, provision_timeout_s, max_oom_retries)

    def stream_chat_completions(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        gpu: str | None = None,
        extra_body: dict[str, Any] | None = None,
        wait_for_capacity: bool = True,
        provision_timeout_s: float | None = None,
        max_oom_retries: int = RESOURCE_EXHAUSTED_MAX_RETRIES,
        **fields: Any,
    ) -> AsyncIterator[dict[str, Any]]:
        """The ``chat.completion.chunk`` events of a streamed chat completion, as dicts."""
        body = chat_body(model, messages, True, fields, extra_body)
        call = self._json_call(CHAT_PATH, model, body, gpu, stream=True)
        return self._stream(call, self._policy(call, wait_for_capacity, provision_timeout_s, max_oom_retries))

    async def responses(
        self,
        model: str,
        input: str | list[dict[str, Any]],
        *,
        max_output_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        gpu: str | None = None,
        wait_for_capacity: bool = True,
        provision_timeout_s: float | None = None,
        max_oom_retries: int = RESOURCE_EXHAUSTED_MAX_RETRIES,
    ) -> dict[str, Any]:
        """One OpenAI Responses result (stateless, text), as its JSON."""
        body = responses_body(model, input, max_output_tokens, temperature, top_p, seed)
        call = self._json_call(RESPONSES_PATH, model, body, gpu)
        return await self._generation_call(call, wait_for_capacity, provision_timeout_s, max_oom_retries)
