"""The upstream client against a real HTTP server on loopback that answers what each test tells it:
the key sent as a bearer token, each failure mapped to the public server's answer with fixed text,
a redirect never followed, an answer past its byte cap refused, and a contract-breaking answer
(a missing index, another width) refused whole."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sie.upstream import openai
from sie.upstream.client import UpstreamClient
from sie.upstream.config import Upstream
from sie.upstream.errors import (
    UpstreamBusy,
    UpstreamFailed,
    UpstreamInputTooLong,
    UpstreamNotReady,
    UpstreamRefusedInput,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


class Canned:
    """What the loopback upstream answers next, and what it received."""

    def __init__(self) -> None:
        self.status, self.body, self.headers = 200, b"{}", dict[str, str]()
        self.seen: list[tuple[str, dict[str, Any], str | None]] = []

    async def __call__(self, request: Request) -> Response:
        self.seen.append(
            (request.url.path, json.loads(await request.body()), request.headers.get("authorization"))
        )
        return Response(self.body, self.status, self.headers, media_type="application/json")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def canned() -> AsyncIterator[tuple[Canned, int]]:
    answer = Canned()

    async def endpoint(request: Request) -> Response:
        return await answer(request)

    app = Starlette(routes=[Route("/v1/{rest:path}", endpoint, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    try:
        yield answer, int(server.servers[0].sockets[0].getsockname()[1])
    finally:
        server.should_exit = True
        await task


@contextlib.asynccontextmanager
async def client(port: int, **fields: Any) -> AsyncIterator[UpstreamClient]:
    upstream = Upstream.model_validate(
        {
            "kind": "openai",
            "base_url": f"http://127.0.0.1:{port}/v1",
            "rate_cap": {"requests_per_minute": 6000, "max_concurrency": 4},
            "endpoints": ["embeddings"],
            **fields,
        }
    )
    made = UpstreamClient("up", upstream)
    try:
        yield made
    finally:
        await made.aclose()


async def test_embeddings_send_the_key_and_come_back_by_index(canned, monkeypatch: pytest.MonkeyPatch):
    answer, port = canned
    monkeypatch.setenv("UP_KEY", "sk-test")
    data = [{"index": 1, "embedding": [0.0, 1.0]}, {"index": 0, "embedding": [1.0, 0.0]}]
    answer.status, answer.body = 200, json.dumps({"data": data, "usage": {"prompt_tokens": 7}}).encode()
    async with client(port, api_key_secret="UP_KEY", set_params={"dimensions": 2}) as up:
        embedded = await openai.embed(up, "org/m", ["a", "b"], "org/model", 2)
    assert embedded.vectors.tolist() == [[1.0, 0.0], [0.0, 1.0]] and embedded.tokens == 7
    path, body, auth = answer.seen[-1]
    assert path == "/v1/embeddings" and auth == "Bearer sk-test"
    assert body == {"model": "org/m", "input": ["a", "b"], "encoding_format": "float", "dimensions": 2}


@pytest.mark.parametrize(
    ("status", "body", "headers", "error", "message"),
    [
        (429, b"{}", {"retry-after": "7"}, UpstreamBusy, "is busy"),
        (503, b'{"detail": {"code": "MODEL_LOADING"}}', {}, UpstreamNotReady, "is loading on its upstream"),
        (500, b"not json", {}, UpstreamBusy, "is unavailable"),
        (501, b"{}", {}, UpstreamFailed, "it answered 501"),
        (
            400,
            b'{"error": {"code": "INVALID_INPUT", "message": "secret-ish"}}',
            {},
            UpstreamRefusedInput,
            "as invalid",
        ),
        (
            413,
            b'{"error": {"code": "INPUT_TOO_LONG", "message": "secret-ish"}}',
            {},
            UpstreamInputTooLong,
            "as too long",
        ),
        (400, b"{}", {"x-sie-error-code": "INPUT_TOO_LONG"}, UpstreamInputTooLong, "as too long"),
        (
            400,
            b'{"detail": {"code": "INVALID_INPUT"}}',
            {"x-sie-error-code": "NOPE"},
            UpstreamRefusedInput,
            "as invalid",
        ),
        (422, b'{"error": {"code": "context_length_exceeded"}}', {}, UpstreamFailed, "it answered 422"),
        (302, b"", {"location": "http://evil.example/steal"}, UpstreamFailed, "redirect, which is refused"),
        (
            200,
            b'{"data": [{"index": 1, "embedding": [1.0]}]}',
            {},
            UpstreamFailed,
            "missing or repeated index",
        ),
        (200, b'{"data": [{"index": 0, "embedding": [1.0, 2.0, 3.0]}]}', {}, UpstreamFailed, "3-dimensional"),
        (
            200,
            b'{"data": [{"index": 0, "embedding": [1.0, "x"]}]}',
            {},
            UpstreamFailed,
            "not lists of numbers",
        ),
        (200, b"[1, 2]", {}, UpstreamFailed, "not a JSON object"),
    ],
    ids=[
        "429",
        "loading",
        "500",
        "501",
        "invalid",
        "too-long",
        "too-long-header",
        "unknown-header",
        "openai-context",
        "redirect",
        "index",
        "width",
        "values",
        "shape",
    ],
)
async def test_each_failure_is_answered_with_fixed_text(canned, status, body, headers, error, message):
    answer, port = canned
    answer.status, answer.body, answer.headers = status, body, headers
    async with client(port) as up:
        with pytest.raises(error) as raised:
            await openai.embed(up, "org/m", ["a"], "org/model", 2)
    assert message in str(raised.value) and "secret-ish" not in str(raised.value)
    assert type(raised.value) is error
    assert raised.value.extra_headers == {"X-SIE-Served-By": "remote", "X-SIE-Upstream": "up"}
    if status == 429:
        assert raised.value.retry_after_s == 7
    assert [path for path, _, _ in answer.seen].count("/steal") == 0


async def test_an_answer_past_its_byte_cap_is_refused(canned):
    answer, port = canned
    answer.status = 200
    answer.body = json.dumps(
        {"data": [{"index": 0, "embedding": [0.5] * 2}], "pad": "x" * (2 << 20)}
    ).encode()
    async with client(port) as up:
        with pytest.raises(UpstreamFailed, match="larger than"):
            await openai.embed(up, "org/m", ["a"], "org/model", 2)


async def test_an_undeclared_endpoint_is_refused_before_anything_is_sent(canned):
    answer, port = canned
    before = len(answer.seen)
    async with client(port) as up:
        with pytest.raises(Exception, match="declares no rerank endpoint"):
            await openai.rerank(up, "org/m", "q", ["d"], "org/model")
    assert len(answer.seen) == before
