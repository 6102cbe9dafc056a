"""Fakes for the SDK tests: a scripted server for ``httpx.MockTransport``, fake time, canned answers."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import httpx
import msgpack
import numpy as np

from sie.sdk import SIEAsyncClient, SIEClient
from sie.wire.arrays import numpy_default

BASE_URL = "http://sie.test"
Answer = Callable[[], httpx.Response]


class FakeTime:
    """A clock that only moves when the client sleeps, and a record of every sleep."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)


class FakeServer:
    """Answers requests from a script, in order; the last answer repeats once the script runs out."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = answers
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answers[min(len(self.requests), len(self.answers)) - 1]()

    def bodies(self) -> list[Any]:
        return [msgpack.unpackb(request.content, raw=False) for request in self.requests]


def packed(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Answer:
    """A msgpack answer, arrays in msgpack-numpy layout, as the server sends them."""
    content = msgpack.packb(body, use_bin_type=True, default=numpy_default)
    return lambda: httpx.Response(
        status, content=content, headers={"content-type": "application/msgpack", **(headers or {})}
    )


def as_json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Answer:
    return lambda: httpx.Response(status, json=body, headers=headers or {})


def error(status: int, code: str | None, message: str = "nope", retry_after: str | None = None, **extra: Any):
    """A JSON error the way the worker sends it: ``{"detail": {"code", "message", ...}}``."""
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return as_json({"detail": {"code": code, "message": message, **extra}}, status, headers)


def raises(factory: Callable[[], Exception]) -> Answer:
    def answer() -> httpx.Response:
        raise factory()

    return answer


def encode_body(count: int = 1, dims: int = 3, **extra: Any) -> dict[str, Any]:
    items = [
        {"dense": {"dims": dims, "dtype": "float32", "values": np.arange(dims, dtype=np.float32) + i}}
        for i in range(count)
    ]
    return {"model": "m", "items": items, "timing": {"total_ms": 1.5, "queue_ms": 0.5}, **extra}


def ok_encode(count: int = 1) -> Answer:
    return packed(encode_body(count))


async def call(client: SIEClient | SIEAsyncClient, method: str, *args: Any, **kwargs: Any) -> Any:
    result = getattr(client, method)(*args, **kwargs)
    return await result if inspect.isawaitable(result) else result
