"""What goes on the wire: bodies byte-for-byte as the public sie-sdk 0.10.1 sends them, and headers.

The expected hex strings were captured from ``sie_sdk.SIEClient`` 0.10.1 making the same calls.
"""

from __future__ import annotations

import httpx
import msgpack
import numpy as np
import pytest

import sie
from sie.sdk import SIEClient

from .fakes import BASE_URL, FakeServer, call, ok_encode, packed

EXTRACT_OK = packed({"model": "m", "items": [{"id": "item-0", "entities": []}]})
SCORE_OK = packed({"model": "m", "query_id": None, "scores": []})


async def test_minimal_encode_body_is_exactly_the_public_one(make_client):
    server = FakeServer(ok_encode())
    await call(make_client(server), "encode", "m", {"text": "hello"})
    assert server.requests[0].content == bytes.fromhex("81a56974656d739181a474657874a568656c6c6f")
    assert server.requests[0].url == httpx.URL(f"{BASE_URL}/v1/encode/m")


async def test_full_encode_body_merges_options_and_is_query_like_the_public_sdk(make_client):
    server = FakeServer(ok_encode(2))
    client = make_client(server, options={"normalize": True, "profile": "p"})
    await call(
        client,
        "encode",
        "BAAI/bge-m3",
        [{"id": "a", "text": "hello"}, {"text": "w"}],
        output_types=["dense", "sparse"],
        instruction="ins",
        output_dtype="float16",
        is_query=True,
        options={"profile": "q"},
        gpu="pool/l4",
    )
    request = server.requests[0]
    assert request.content.hex() == (
        "82a56974656d739282a26964a161a474657874a568656c6c6f81a474657874a177a6706172616d7384ac6f75747075745f"
        "747970657392a564656e7365a6737061727365ab696e737472756374696f6ea3696e73ac6f75747075745f6474797065a766"
        "6c6f61743136a76f7074696f6e7383a96e6f726d616c697a65c3a770726f66696c65a171a869735f7175657279c3"
    )
    assert request.url.path == "/v1/encode/BAAI/bge-m3"
    assert request.headers["X-SIE-MACHINE-PROFILE"] == "l4"
    assert request.headers["X-SIE-Pool"] == "pool"


async def test_is_query_false_alone_creates_params_options(make_client):
    server = FakeServer(ok_encode())
    await call(make_client(server), "encode", "m", {"text": "q"}, is_query=False)
    assert server.requests[0].content.hex() == (
        "82a56974656d739181a474657874a171a6706172616d7381a76f7074696f6e7381a869735f7175657279c2"
    )


async def test_score_body_is_top_level_query_items_instruction_options(make_client):
    server = FakeServer(SCORE_OK)
    client = make_client(server, gpu="l4")
    await call(
        client,
        "score",
        "m",
        {"text": "q"},
        [{"text": "d1"}, {"id": "x", "text": "d2"}],
        instruction="i",
        options={"a": 1},
    )
    assert server.requests[0].content.hex() == (
        "84a5717565727981a474657874a171a56974656d739281a474657874a2643182a26964a178a474657874a26432ab696e7374"
        "72756374696f6ea169a76f7074696f6e7381a16101"
    )
    assert server.requests[0].url.path == "/v1/score/m"
    assert server.requests[0].headers["X-SIE-MACHINE-PROFILE"] == "l4"
    assert "X-SIE-Pool" not in server.requests[0].headers


async def test_minimal_score_body(make_client):
    server = FakeServer(SCORE_OK)
    await call(make_client(server), "score", "m", {"text": "q"}, [{"text": "d1"}])
    assert (
        server.requests[0].content.hex() == "82a5717565727981a474657874a171a56974656d739181a474657874a26431"
    )


async def test_extract_body_puts_labels_schema_instruction_options_in_params(make_client):
    server = FakeServer(EXTRACT_OK)
    await call(
        make_client(server),
        "extract",
        "m",
        {"text": "Tim Cook leads Apple."},
        labels=["person", "organization"],
        output_schema={"k": "v"},
        instruction="i",
        options={"threshold": 0.3},
    )
    assert server.requests[0].content.hex() == (
        "82a56974656d739181a474657874b554696d20436f6f6b206c65616473204170706c652ea6706172616d7384a66c6162656c"
        "7392a6706572736f6eac6f7267616e697a6174696f6ead6f75747075745f736368656d6181a16ba176ab696e73747275637469"
        "6f6ea169a76f7074696f6e7381a97468726573686f6c64cb3fd3333333333333"
    )
    assert server.requests[0].url.path == "/v1/extract/m"


async def test_minimal_extract_body(make_client):
    server = FakeServer(EXTRACT_OK)
    await call(make_client(server), "extract", "m", [{"text": "a"}])
    assert server.requests[0].content.hex() == "81a56974656d739181a474657874a161"


async def test_image_bytes_travel_with_their_sniffed_format(make_client):
    server = FakeServer(ok_encode())
    await call(make_client(server), "encode", "m", {"images": [b"\x89PNG\r\n\x1a\nrest"]})
    assert server.requests[0].content.hex() == (
        "81a56974656d739181a6696d616765739182a464617461c40c89504e470d0a1a0a72657374a6666f726d6174a3706e67"
    )


async def test_default_headers_carry_msgpack_version_and_bearer_key(make_client):
    server = FakeServer(ok_encode())
    await call(make_client(server, api_key="sk-123"), "encode", "m", {"text": "x"})
    headers = server.requests[0].headers
    assert headers["Content-Type"] == "application/msgpack"
    assert headers["Accept"] == "application/msgpack"
    assert headers["X-SIE-SDK-Version"] == sie.__version__
    assert headers["Authorization"] == "Bearer sk-123"


async def test_no_key_means_no_authorization_header(make_client):
    server = FakeServer(ok_encode())
    await call(make_client(server), "encode", "m", {"text": "x"})
    assert "Authorization" not in server.requests[0].headers


async def test_per_call_gpu_overrides_the_client_default(make_client):
    server = FakeServer(ok_encode())
    client = make_client(server, gpu="l4")
    await call(client, "encode", "m", {"text": "x"}, gpu="a100-80gb")
    await call(client, "encode", "m", {"text": "x"})
    assert [r.headers["X-SIE-MACHINE-PROFILE"] for r in server.requests] == ["a100-80gb", "l4"]


async def test_client_options_sit_under_call_options(make_client):
    server = FakeServer(SCORE_OK, EXTRACT_OK)
    client = make_client(server, options={"profile": "fast", "normalize": True})
    await call(client, "score", "m", {"text": "q"}, [{"text": "d"}], options={"profile": "slow"})
    await call(client, "extract", "m", {"text": "d"})
    score_body, extract_body = server.bodies()
    assert score_body["options"] == {"profile": "slow", "normalize": True}
    assert extract_body["params"] == {"options": {"profile": "fast", "normalize": True}}


async def test_numpy_multivector_in_an_item_is_packed_as_msgpack_numpy(make_client):
    server = FakeServer(SCORE_OK)
    query = {"multivector": np.ones((2, 3), dtype=np.float32)}
    await call(make_client(server), "score", "m", query, [{"text": "d"}])
    sent = msgpack.unpackb(server.requests[0].content, raw=False)["query"]["multivector"]
    assert sent[b"shape"] == [2, 3]
    assert sent[b"type"] == "<f4"
    assert np.frombuffer(sent[b"data"], dtype=np.float32).tolist() == [1.0] * 6


async def test_models_are_fetched_as_json(make_client):
    models = [{"name": "BAAI/bge-m3", "loaded": True, "dims": {"dense": 1024}}]
    server = FakeServer(
        lambda: httpx.Response(200, json={"models": models}),
        lambda: httpx.Response(200, json=models[0]),
    )
    client = make_client(server)
    assert await call(client, "list_models") == models
    assert await call(client, "get_model", "BAAI/bge-m3") == models[0]
    assert [r.url.path for r in server.requests] == ["/v1/models", "/v1/models/BAAI/bge-m3"]
    assert all(r.headers["Accept"] == "application/json" for r in server.requests)


def test_base_url_and_key_fall_back_to_the_environment(monkeypatch):
    monkeypatch.setenv("SIE_BASE_URL", "https://sie.example/")
    monkeypatch.setenv("SIE_API_KEY", "env-key")
    with SIEClient() as client:
        assert client.base_url == "https://sie.example"
        assert client._headers["Authorization"] == "Bearer env-key"
    # The environment's key is never sent to some other server.
    with SIEClient("https://elsewhere.example") as client:
        assert "Authorization" not in client._headers


def test_missing_base_url_is_a_clear_error():
    with pytest.raises(ValueError, match="SIE_BASE_URL"):
        SIEClient()
