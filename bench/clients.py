"""Request senders: our SDK (msgpack) and OpenAI-style JSON (our ``/v1/embeddings``, Infinity's
``/embeddings``). Each ``send`` returns when the full answer is read and checked, or raises.

Both count every non-2xx HTTP answer in ``statuses``, including the ones the SDK retries internally
(``RESOURCE_EXHAUSTED``, ``MODEL_LOADING``), so hidden retries show up in the report.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Protocol

import httpx
import numpy as np

from sie.sdk import Item, SIEAsyncClient

TIMEOUT = httpx.Timeout(180.0, connect=10.0)


class RequestFailed(Exception):
    def __init__(self, message: str, retry_after_s: float = 0.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Sender(Protocol):
    label: str
    statuses: Counter[int]

    async def send(self, texts: list[str]) -> None: ...

    async def vectors(self, texts: list[str]) -> np.ndarray: ...

    async def aclose(self) -> None: ...


def _http(max_connections: int, statuses: Counter[int]) -> httpx.AsyncClient:
    async def count(response: httpx.Response) -> None:
        if response.status_code >= 300:
            statuses[response.status_code] += 1

    return httpx.AsyncClient(
        timeout=TIMEOUT,
        limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        event_hooks={"response": [count]},
    )


def _retry_after(response: httpx.Response) -> float:
    try:
        return min(float(response.headers.get("retry-after", "0.1")), 1.0)
    except ValueError:
        return 0.1


class SdkSender:
    """``SIEAsyncClient.encode(model, [Item(text=...)])`` over msgpack, with the SDK's own retries."""

    def __init__(self, base_url: str, model: str, max_connections: int) -> None:
        self.label = "sdk"
        self.statuses: Counter[int] = Counter()
        self.model = model
        self._client = SIEAsyncClient(base_url, http_client=_http(max_connections, self.statuses))

    async def _encode(self, texts: list[str]) -> list[np.ndarray]:
        results = await self._client.encode(self.model, [Item(text=text) for text in texts])
        if len(results) != len(texts):
            raise RequestFailed(f"{len(results)} results for {len(texts)} items")
        return [result["dense"] for result in results]

    async def send(self, texts: list[str]) -> None:
        await self._encode(texts)

    async def vectors(self, texts: list[str]) -> np.ndarray:
        return np.stack(await self._encode(texts)).astype(np.float32)

    async def aclose(self) -> None:
        await self._client.close()


class JsonSender:
    """POST ``{"model": ..., "input": [...]}`` (float encoding), the OpenAI embeddings body."""

    def __init__(self, base_url: str, route: str, model: str, max_connections: int) -> None:
        self.label = "json"
        self.statuses: Counter[int] = Counter()
        self.model = model
        self._url = base_url + route
        self._http = _http(max_connections, self.statuses)

    async def _post(self, texts: list[str]) -> list[dict[str, object]]:
        body = json.dumps({"model": self.model, "input": texts}).encode()
        response = await self._http.post(
            self._url, content=body, headers={"content-type": "application/json"}
        )
        if response.status_code != 200:
            raise RequestFailed(f"HTTP {response.status_code}: {response.text[:200]}", _retry_after(response))
        data = json.loads(response.content)["data"]
        if len(data) != len(texts):
            raise RequestFailed(f"{len(data)} embeddings for {len(texts)} inputs")
        return data  # type: ignore[no-any-return]

    async def send(self, texts: list[str]) -> None:
        await self._post(texts)

    async def vectors(self, texts: list[str]) -> np.ndarray:
        data = sorted(await self._post(texts), key=lambda row: int(row["index"]))  # type: ignore[call-overload]
        return np.asarray([row["embedding"] for row in data], dtype=np.float32)

    async def aclose(self) -> None:
        await self._http.aclose()
