"""Bad input against a real server: exact status, wire code and message, and the server keeps serving.

Every error is JSON ``{"detail": {"code", "message"}}`` (even when msgpack was asked for), except
FastAPI's own 404/405 (``{"detail": "Not Found"}``). Messages in backticks are matched exactly; they
are the public SIE's (msgspec's) words. This table is the one in the README:

| Request (``POST /v1/encode/{model}`` unless named)             | Status | ``detail.code``     | Message                                                                                  |
|----------------------------------------------------------------|--------|---------------------|------------------------------------------------------------------------------------------|
| ``{"items": []}``                                              | 400    | INVALID_INPUT       | ``Field 'items' must not be empty``                                                      |
| ``{}`` (no ``items``)                                          | 400    | INVALID_INPUT       | ``Object missing required field `items```                                               |
| ``{"items": [{"text": 1}]}``                                   | 400    | INVALID_INPUT       | ``Expected `str | null`, got `int` - at `$.items[0].text```                              |
| ``{"items": [{}]}`` (no text)                                  | 400    | INVALID_INPUT       | ``SentenceTransformer adapters requires text input``                                     |
| an item with ``audio``, ``video`` or ``document`` (text or not)  | 400    | INVALID_INPUT       | ``Item {i} carries video: this release reads text and images; ...`` (never read silently as its text) |
| unknown model ``x/y``                                          | 404    | MODEL_NOT_FOUND     | ``Model 'x/y' not found``                                                                |
| model id with a line break (``x%0Ay``)                         | 404    | MODEL_NOT_FOUND     | ``Model 'x\\ny' not found`` (not FastAPI's bare 404)                                     |
| malformed msgpack (``c1 ff 00 ...``)                           | 400    | INVALID_INPUT       | ``MessagePack data is malformed: invalid opcode '\\xc1' (byte 0)``                       |
| malformed JSON (``{not json``)                                 | 400    | INVALID_INPUT       | ``JSON is malformed: object keys must be strings (byte 1)``                              |
| msgpack bytes without a msgpack ``Content-Type``               | 400    | INVALID_INPUT       | ``JSON is malformed: invalid character (byte 0)`` (the body is read as JSON)             |
| invalid UTF-8 in a msgpack str or a JSON string                | 400    | INVALID_INPUT       | says "UTF-8"                                                                             |
| JSON nested 5000 levels deep (inside ``metadata``)             | 400    | INVALID_INPUT       | any message; never a 500                                                                 |
| ``params.output_types: ["sparse"]``                            | 400    | INVALID_INPUT       | ``Model '{model}' does not support output types: {'sparse'}. Supported: {'dense'}``      |
| ``params.output_types: ["foo"]``                               | 400    | INVALID_INPUT       | names ``'foo'``                                                                          |
| ``params.output_dtype: "float64"``                             | 400    | INVALID_INPUT       | names ``'float64'``                                                                      |
| ``params.options.is_query: "yes"``                             | 400    | INVALID_INPUT       | ``Option 'is_query' must be bool, got str``                                              |
| unknown top-level field (``"bogus": 1``)                       | 200    |                     | ignored                                                                                  |
| text longer than the model's 256 tokens (2000 words)           | 200    |                     | truncated silently: extra words past the limit change nothing                            |
| one request with more items than ``SIE_MAX_CONCURRENT_REQUESTS`` | 400 | INVALID_INPUT     | names the limit (it can never be admitted, so no retry is invited)                       |
| items while the model's queue is full                          | 503    | QUEUE_FULL          | names the limit; ``Retry-After: 1``                                                      |
| body over ``SIE_MAX_REQUEST_BODY_BYTES`` (length or chunked)   | 413    | INPUT_TOO_LONG      | ``Request body exceeds the limit of {n} bytes (SIE_MAX_REQUEST_BODY_BYTES)``             |
| one item's text over ``SIE_MAX_ITEM_TEXT_BYTES`` (UTF-8 bytes) | 400    | INVALID_INPUT       | ``Field 'items[{i}]' must hold at most {n} bytes of UTF-8 text`` (the public words)      |
| ``POST /v1/embeddings`` body over the limit                    | 413    | (OpenAI envelope)   | ``{"error": {"code": "INPUT_TOO_LONG", ...}}``, the same message                         |
| ``POST /v1/score/{embedding model}``                           | 400    | INVALID_INPUT       | ``Model '{model}' does not support scoring. Use an encoder model with /v1/encode instead, or use a reranker model.`` |
| ``POST /v1/extract/{embedding model}``                         | 400    | INVALID_INPUT       | ``Model '{model}' does not support extraction. Use an extraction model like GLiNER, GLiClass, or Florence-2.`` |
| ``GET /v1/encode/{model}``                                     | 405    | (FastAPI)           | ``{"detail": "Method Not Allowed"}``                                                     |
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import random
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import msgpack
import pytest

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
ENCODE = f"/v1/encode/{MODEL}"
RUNTIME_INSTANCE = re.compile(r"^[0-9a-f]{64}$")
# Must match SMALL_QUEUE / SMALL_BODY_BYTES / SMALL_ITEM_TEXT_BYTES in conftest.py.
SMALL_QUEUE = 8
SMALL_BODY_BYTES = 1024 * 1024
SMALL_ITEM_TEXT_BYTES = 64 * 1024


def assert_error(response: httpx.Response, status: int, code: str, *, identity: bool = True) -> str:
    """Status, JSON envelope and code; returns the message for the caller's own check.

    ``identity``: the public server sends ``X-SIE-Runtime-Instance`` on 4xx answers too.
    """
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    if identity:
        assert RUNTIME_INSTANCE.match(response.headers.get("x-sie-runtime-instance", "")), response.headers
    detail = response.json()["detail"]
    assert detail["code"] == code, detail
    assert isinstance(detail["message"], str)
    return detail["message"]


def post_json(client: httpx.Client, body: Any, path: str = ENCODE) -> httpx.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(path, content=raw, headers={"content-type": "application/json"})


def post_msgpack(client: httpx.Client, body: Any, path: str = ENCODE) -> httpx.Response:
    raw = body if isinstance(body, bytes) else msgpack.packb(body)
    return client.post(
        path, content=raw, headers={"content-type": "application/msgpack", "accept": "application/msgpack"}
    )


@dataclass(frozen=True)
class Case:
    body: Any
    status: int
    code: str
    message: str


# Bodies that decode the same way in both encodings: each runs as msgpack and as JSON.
BODY_CASES = {
    "empty-items": Case({"items": []}, 400, "INVALID_INPUT", "Field 'items' must not be empty"),
    "missing-items": Case({}, 400, "INVALID_INPUT", "Object missing required field `items`"),
    "text-wrong-type": Case(
        {"items": [{"text": 1}]},
        400,
        "INVALID_INPUT",
        "Expected `str | null`, got `int` - at `$.items[0].text`",
    ),
    "item-without-text": Case(
        {"items": [{}]}, 400, "INVALID_INPUT", "SentenceTransformer adapters requires text input"
    ),
    "unsupported-output-type": Case(
        {"items": [{"text": "hello"}], "params": {"output_types": ["sparse"]}},
        400,
        "INVALID_INPUT",
        f"Model '{MODEL}' does not support output types: {{'sparse'}}. Supported: {{'dense'}}",
    ),
    "is-query-wrong-type": Case(
        {"items": [{"text": "hello"}], "params": {"options": {"is_query": "yes"}}},
        400,
        "INVALID_INPUT",
        "Option 'is_query' must be bool, got str",
    ),
}


@pytest.mark.parametrize("encoding", ["msgpack", "json"])
@pytest.mark.parametrize("case", list(BODY_CASES.values()), ids=list(BODY_CASES))
def test_invalid_body(server, case: Case, encoding: str) -> None:
    post = post_msgpack if encoding == "msgpack" else post_json
    message = assert_error(post(server.client, case.body), case.status, case.code)
    assert message == case.message
    server.assert_serving()


@pytest.mark.parametrize("kind", ["audio", "video", "document"])
def test_an_item_with_media_no_family_reads_is_refused_not_answered_from_its_text(server, kind: str) -> None:
    """An item's text beside a video is not embedded as if the video had been seen; a score's query
    is checked like its items."""
    media = {"data": b"\x00\x00\x00\x18ftypmp42", "format": "mp4"}
    body = {"items": [{"text": "fine"}, {"text": "hello", kind: media}]}
    message = assert_error(post_msgpack(server.client, body), 400, "INVALID_INPUT")
    assert message == (
        f"Item 1 carries {kind}: this release reads text and images; "
        "audio, video and document inputs are not served"
    )
    encoded = {**media, "data": base64.b64encode(media["data"]).decode()}
    score = {"query": {"text": "q", kind: encoded}, "items": [{"text": "d"}]}
    message = assert_error(post_json(server.client, score, f"/v1/score/{MODEL}"), 400, "INVALID_INPUT")
    assert message.startswith(f"Query carries {kind}: ")
    assert post_msgpack(server.client, {"items": [{"text": "hello"}]}).status_code == 200


@pytest.mark.parametrize("bogus", ["foo", "Dense", ""])
@pytest.mark.parametrize("encoding", ["msgpack", "json"])
def test_nonsense_output_type(server, bogus: str, encoding: str) -> None:
    post = post_msgpack if encoding == "msgpack" else post_json
    body = {"items": [{"text": "hello"}], "params": {"output_types": [bogus]}}
    message = assert_error(post(server.client, body), 400, "INVALID_INPUT")
    assert f"'{bogus}'" in message
    server.assert_serving()


@pytest.mark.parametrize("dtype", ["float64", "int4", "FLOAT32"])
def test_unknown_output_dtype(server, dtype: str) -> None:
    body = {"items": [{"text": "hello"}], "params": {"output_dtype": dtype}}
    message = assert_error(post_msgpack(server.client, body), 400, "INVALID_INPUT")
    assert f"'{dtype}'" in message
    server.assert_serving()


@pytest.mark.parametrize(
    "model", ["x/y", "no-such-org/no-such-model", "sentence-transformers/all-MiniLM-L6-v2:nope"]
)
def test_unknown_model(server, model: str) -> None:
    response = post_msgpack(server.client, {"items": [{"text": "hello"}]}, f"/v1/encode/{model}")
    assert assert_error(response, 404, "MODEL_NOT_FOUND") == f"Model '{model}' not found"
    server.assert_serving()


def test_model_id_with_a_line_break_is_not_found(server) -> None:
    """``{model:path}`` stops at a newline, so such an id matched no route; ``model_id`` spans it."""
    response = post_msgpack(server.client, {"items": [{"text": "hello"}]}, "/v1/encode/x%0Ay")
    assert assert_error(response, 404, "MODEL_NOT_FOUND") == "Model 'x\ny' not found"
    response = server.client.get("/v1/models/x%0Ay")
    assert assert_error(response, 404, "MODEL_NOT_FOUND") == "Model 'x\ny' not found"


def test_malformed_msgpack(server) -> None:
    response = post_msgpack(server.client, bytes.fromhex("c1ff0067617262616765"))
    message = assert_error(response, 400, "INVALID_INPUT")
    assert message.startswith("MessagePack data is malformed")
    assert message == "MessagePack data is malformed: invalid opcode '\\xc1' (byte 0)"
    server.assert_serving()


def test_truncated_msgpack(server) -> None:
    whole = msgpack.packb({"items": [{"text": "hello"}]})
    message = assert_error(post_msgpack(server.client, whole[:-3]), 400, "INVALID_INPUT")
    assert message  # msgspec: "Input data was truncated"
    server.assert_serving()


def test_malformed_json(server) -> None:
    message = assert_error(post_json(server.client, b"{not json"), 400, "INVALID_INPUT")
    assert message.startswith("JSON is malformed")
    assert message == "JSON is malformed: object keys must be strings (byte 1)"
    server.assert_serving()


@pytest.mark.parametrize("content_type", [None, "text/plain"])
def test_msgpack_bytes_without_msgpack_content_type_are_read_as_json(server, content_type) -> None:
    headers = {"content-type": content_type} if content_type else {}
    raw = msgpack.packb({"items": [{"text": "hello"}]})
    request = server.client.build_request("POST", ENCODE, content=raw, headers=headers)
    if content_type is None:
        request.headers.pop("content-type", None)
    message = assert_error(server.client.send(request), 400, "INVALID_INPUT")
    assert message == "JSON is malformed: invalid character (byte 0)"
    server.assert_serving()


def test_invalid_utf8_in_msgpack_str(server) -> None:
    # {"items": [{"text": <str of 2 bytes ff fe>}]}: a str header around bytes that are not UTF-8.
    raw = b"\x81\xa5items\x91\x81\xa4text\xa2\xff\xfe"
    message = assert_error(post_msgpack(server.client, raw), 400, "INVALID_INPUT")
    assert "UTF-8" in message
    server.assert_serving()


def test_invalid_utf8_in_json(server) -> None:
    message = assert_error(
        post_json(server.client, b'{"items": [{"text": "\xff\xfe"}]}'), 400, "INVALID_INPUT"
    )
    assert "UTF-8" in message
    server.assert_serving()


@pytest.mark.parametrize("encoding", ["msgpack", "json"])
def test_deeply_nested_body_is_a_400_not_a_500(server, encoding: str) -> None:
    depth = 5000
    # A connection of its own: an unhandled error makes uvicorn drop the connection it came on.
    with httpx.Client(base_url=server.url, timeout=60) as client:
        if encoding == "json":
            raw = b'{"items": [{"text": "a", "metadata": {"x": ' + b"[" * depth + b"]" * depth + b"}}]}"
            response = post_json(client, raw)
        else:
            # fixarray of one element, nested: 0x91 0x91 ... 0x90
            nested = b"\x91" * depth + b"\x90"
            raw = b"\x81\xa5items\x91\x82\xa4text\xa1a\xa8metadata\x81\xa1x" + nested
            response = post_msgpack(client, raw)
    assert_error(response, 400, "INVALID_INPUT")
    server.assert_serving()


def test_unknown_fields_are_ignored(server) -> None:
    body = {"items": [{"text": "hello", "colour": "red"}], "bogus": 1, "params": {"nope": True}}
    response = post_msgpack(server.client, body)
    assert response.status_code == 200, response.text
    server.assert_serving()


WORDS = ("search", "engine", "vector", "index", "query", "document", "ranking", "latency", "batch")
MORE_WORDS = ("token", "model", "server", "embedding", "cluster", "shard", "replica", "cache", "memory")


def _words(count: int, seed: int) -> str:
    vocabulary = WORDS + MORE_WORDS
    rng = random.Random(seed)
    return " ".join(rng.choice(vocabulary) for _ in range(count))


def test_text_longer_than_the_model_is_truncated(server, cosine) -> None:
    long_text = _words(2000, seed=1)
    longer_text = long_text + " " + _words(500, seed=2)
    response = post_msgpack(server.client, {"items": [{"text": long_text}]})
    assert response.status_code == 200, response.text
    (long_vector,) = server.encode([long_text])
    (longer_vector,) = server.encode([longer_text])
    (short_vector,) = server.encode([_words(30, seed=1)])
    # Everything past the first 256 tokens is dropped, so appending words changes nothing...
    assert cosine(long_vector, longer_vector) >= 0.99999
    # ...while the text is still read: a much shorter prefix gives another vector.
    assert cosine(long_vector, short_vector) < 0.999
    server.assert_serving()


def test_score_on_embedding_model(server) -> None:
    body = {"query": {"text": "q"}, "items": [{"text": "d"}]}
    response = post_msgpack(server.client, body, f"/v1/score/{MODEL}")
    assert assert_error(response, 400, "INVALID_INPUT") == (
        f"Model '{MODEL}' does not support scoring. "
        "Use an encoder model with /v1/encode instead, or use a reranker model."
    )
    server.assert_serving()


def test_extract_on_embedding_model(server) -> None:
    body = {"items": [{"text": "Alice lives in Paris"}], "params": {"labels": ["person"]}}
    response = post_msgpack(server.client, body, f"/v1/extract/{MODEL}")
    assert assert_error(response, 400, "INVALID_INPUT") == (
        f"Model '{MODEL}' does not support extraction. "
        "Use an extraction model like GLiNER, GLiClass, or Florence-2."
    )
    server.assert_serving()


def test_score_without_query(server) -> None:
    response = post_msgpack(server.client, {"items": [{"text": "a"}]}, f"/v1/score/{MODEL}")
    assert assert_error(response, 400, "INVALID_INPUT") == "Object missing required field `query`"
    server.assert_serving()


def test_get_on_encode_is_405(server) -> None:
    response = server.client.get(ENCODE)
    assert response.status_code == 405
    assert response.json() == {"detail": "Method Not Allowed"}
    server.assert_serving()


def test_unknown_route_is_fastapi_404(server) -> None:
    response = server.client.post("/v2/encode/x", content=b"{}")
    assert response.status_code == 404
    assert response.json() == {"detail": "Not Found"}
    server.assert_serving()


# -- limits, on the small server ------------------------------------------------------------------


def test_more_items_than_the_queue_admits(small_server) -> None:
    items = [{"text": f"item {i}"} for i in range(SMALL_QUEUE + 1)]
    response = post_msgpack(small_server.client, {"items": items})
    message = assert_error(response, 400, "INVALID_INPUT")
    assert f"admits at most {SMALL_QUEUE} at once" in message
    # Exactly the limit is admitted.
    response = post_msgpack(small_server.client, {"items": items[:SMALL_QUEUE]})
    assert response.status_code == 200, response.text
    small_server.assert_serving()


async def test_full_queue_answers_503_with_retry_after(small_server) -> None:
    body = msgpack.packb({"items": [{"text": " ".join(["word"] * 200)}] * SMALL_QUEUE})
    headers = {"content-type": "application/msgpack"}
    statuses: list[int] = []
    async with httpx.AsyncClient(base_url=small_server.url, timeout=60) as client:
        for _ in range(5):  # a burst of full-size requests: all but the running one find the queue full
            responses = await asyncio.gather(
                *(client.post(ENCODE, content=body, headers=headers) for _ in range(12))
            )
            for response in responses:
                statuses.append(response.status_code)
                if response.status_code == 503:
                    assert response.json()["detail"]["code"] == "QUEUE_FULL"
                    assert response.headers["retry-after"] == "1"
                    assert f"limit of {SMALL_QUEUE}" in response.json()["detail"]["message"]
            if 503 in statuses:
                break
    assert 503 in statuses and 200 in statuses
    assert set(statuses) <= {200, 503}
    small_server.assert_serving()


def _padded_json(size: int) -> bytes:
    """A valid encode body of exactly ``size`` bytes (JSON allows trailing whitespace)."""
    raw = json.dumps({"items": [{"text": "hello"}]}).encode()
    assert size >= len(raw)
    return raw + b" " * (size - len(raw))


def _chunks(raw: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for start in range(0, len(raw), size):
        yield raw[start : start + size]


def test_body_at_the_limit_is_accepted(small_server) -> None:
    response = post_json(small_server.client, _padded_json(SMALL_BODY_BYTES))
    assert response.status_code == 200, response.text


def test_body_over_the_limit_with_content_length(small_server) -> None:
    raw = _padded_json(SMALL_BODY_BYTES + 1)
    response = post_json(small_server.client, raw)
    assert response.request.headers["content-length"] == str(len(raw))
    message = assert_error(response, 413, "INPUT_TOO_LONG", identity=False)
    assert message == (
        f"Request body exceeds the limit of {SMALL_BODY_BYTES} bytes (SIE_MAX_REQUEST_BODY_BYTES)"
    )
    small_server.assert_serving()


def test_body_over_the_limit_carries_the_runtime_instance(small_server) -> None:
    """Every answer names the process that gave it, the early 413 included (as on other 4xx)."""
    response = post_json(small_server.client, _padded_json(SMALL_BODY_BYTES + 1))
    assert response.status_code == 413
    assert RUNTIME_INSTANCE.match(response.headers.get("x-sie-runtime-instance", "")), response.headers


def _connect(server: Any) -> socket.socket:
    """A raw TCP connection to ``server``, for what an HTTP client would not send."""
    url = httpx.URL(server.url)
    return socket.create_connection((url.host, url.port), timeout=30)


def _raw_exchange(server: Any, head: bytes, body: Iterator[bytes]) -> bytes:
    """Sends ``head`` and then ``body`` on a new connection; everything answered until it closed."""
    with _connect(server) as sock:
        sock.sendall(head)
        return _raw_rest(sock, body)


def _raw_rest(sock: socket.socket, body: Iterator[bytes]) -> bytes:
    """Sends ``body`` (stopping where the server closed the connection) and reads until it closes."""
    with contextlib.suppress(OSError):  # the server may answer and close before the body is sent
        for chunk in body:
            sock.sendall(chunk)
        sock.shutdown(socket.SHUT_WR)
    answer = b""
    with contextlib.suppress(OSError):  # a reset after the answer ends it as a close does
        while data := sock.recv(65536):
            answer += data
    return answer


def test_bytes_past_the_content_length_are_not_body(small_server) -> None:
    """The body limit trusts a declared length within it, because the server frames the body by that
    length: what follows on the connection is the next request (here 2 MiB that is no HTTP, refused
    as such), never more of this body."""
    declared = _padded_json(1000)
    head = (
        f"POST {ENCODE} HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
        f"content-length: {len(declared)}\r\n\r\n"
    ).encode()
    with _connect(small_server) as sock:
        sock.sendall(head + declared)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(65536)
        head_answer, _, body = answer.partition(b"\r\n\r\n")
        assert head_answer.startswith(b"HTTP/1.1 200"), answer[:300]
        length = int(re.search(rb"content-length: (\d+)", head_answer, re.IGNORECASE)[1])  # type: ignore[index]
        while len(body) < length:
            body += sock.recv(65536)
        assert msgpack.unpackb(body)["items"][0]["dense"]  # the body it declared, answered
        refused = _raw_rest(sock, iter([b"x" * (SMALL_BODY_BYTES * 2)]))
    assert refused.startswith(b"HTTP/1.1 400"), refused[:300]
    small_server.assert_serving()


def test_a_chunked_body_that_also_declares_a_small_length_is_counted(small_server) -> None:
    """With both headers the body is the chunked one (or the request is refused): a small declared
    length must not let a larger chunked body past the limit."""
    head = (
        f"POST {ENCODE} HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
        "content-length: 10\r\ntransfer-encoding: chunked\r\n\r\n"
    ).encode()
    piece = 64 * 1024
    chunks = (b"%x\r\n" % piece + b" " * piece + b"\r\n" for _ in range(SMALL_BODY_BYTES // piece + 4))
    answer = _raw_exchange(small_server, head, itertools.chain(chunks, [b"0\r\n\r\n"]))
    status = answer.split(b"\r\n", 1)[0]
    assert status.startswith((b"HTTP/1.1 413", b"HTTP/1.1 400")), answer[:300]
    if status.startswith(b"HTTP/1.1 413"):
        assert b"INPUT_TOO_LONG" in answer
    small_server.assert_serving()


def test_chunked_body_under_the_limit_is_accepted(small_server) -> None:
    response = small_server.client.post(
        ENCODE,
        content=_chunks(_padded_json(SMALL_BODY_BYTES // 2)),
        headers={"content-type": "application/json"},
    )
    assert response.request.headers["transfer-encoding"] == "chunked"
    assert response.status_code == 200, response.text


def test_chunked_body_over_the_limit(small_server) -> None:
    response = small_server.client.post(
        ENCODE,
        content=_chunks(_padded_json(SMALL_BODY_BYTES + 64 * 1024)),
        headers={"content-type": "application/json"},
    )
    assert response.request.headers["transfer-encoding"] == "chunked"
    assert "content-length" not in response.request.headers
    message = assert_error(response, 413, "INPUT_TOO_LONG")
    assert message == (
        f"Request body exceeds the limit of {SMALL_BODY_BYTES} bytes (SIE_MAX_REQUEST_BODY_BYTES)"
    )
    small_server.assert_serving()


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_body_over_the_limit_on_the_openai_route(small_server, chunked: bool) -> None:
    """The OpenAI route refuses in OpenAI's envelope, whether the middleware or the route saw it."""
    raw = json.dumps({"model": MODEL, "input": "x" * (SMALL_BODY_BYTES + 1)}).encode()
    response = small_server.client.post(
        "/v1/embeddings",
        content=_chunks(raw) if chunked else raw,
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["code"] == "INPUT_TOO_LONG"
    assert error["type"] == "invalid_request_error"
    assert error["message"] == (
        f"Request body exceeds the limit of {SMALL_BODY_BYTES} bytes (SIE_MAX_REQUEST_BODY_BYTES)"
    )
    small_server.assert_serving()


def _ascii_text(size: int) -> str:
    return ("ab " * size)[:size]


def test_item_text_at_the_limit_is_accepted(small_server) -> None:
    response = post_msgpack(small_server.client, {"items": [{"text": _ascii_text(SMALL_ITEM_TEXT_BYTES)}]})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    "text",
    [
        _ascii_text(SMALL_ITEM_TEXT_BYTES + 1),
        # Fewer characters than the limit, but two UTF-8 bytes each: the limit counts bytes.
        "é" * (SMALL_ITEM_TEXT_BYTES // 2 + 1),
    ],
    ids=["ascii", "two-byte-chars"],
)
def test_item_text_over_the_limit(small_server, text: str) -> None:
    items = [{"text": "short"}, {"text": text}]
    message = assert_error(post_msgpack(small_server.client, {"items": items}), 400, "INVALID_INPUT")
    assert message == item_over("items[1]")
    small_server.assert_serving()


OVER = _ascii_text(SMALL_ITEM_TEXT_BYTES + 1)


def item_over(field: str) -> str:
    """The public server's words for an item past ``SIE_MAX_ITEM_TEXT_BYTES``."""
    return f"Field '{field}' must hold at most {SMALL_ITEM_TEXT_BYTES} bytes of UTF-8 text"


ITEM_1_OVER = item_over("items[1]")
RERANKER = "cross-encoder/ms-marco-MiniLM-L-6-v2"  # in the catalogue; its weights are never needed here


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (ENCODE, {"items": [{"text": "short"}, {"text": OVER}]}),
        (
            f"/v1/score/{MODEL}",
            {
                "query": {"text": "q"},
                "items": [{"text": "d"}, {"text": OVER}],
                "options": {"score_mode": "dense"},
            },
        ),
        ("/v1/extract/nationaldesignstudio/rampart", {"items": [{"text": "John"}, {"text": OVER}]}),
    ],
    ids=["encode", "score", "extract"],
)
def test_item_text_limit_holds_on_every_native_route(small_server, path: str, body: dict[str, Any]) -> None:
    assert assert_error(post_msgpack(small_server.client, body, path), 400, "INVALID_INPUT") == ITEM_1_OVER
    small_server.assert_serving()


def test_a_score_query_over_the_limit(small_server) -> None:
    body = {"query": {"text": OVER}, "items": [{"text": "d"}], "options": {"score_mode": "dense"}}
    message = assert_error(
        post_msgpack(small_server.client, body, f"/v1/score/{MODEL}"), 400, "INVALID_INPUT"
    )
    assert message == item_over("query")


@pytest.mark.parametrize(
    ("path", "body", "code", "field"),
    [
        ("/v1/embeddings", {"model": MODEL, "input": ["short", OVER]}, "invalid_request", "input[1]"),
        # Checked before a cold reranker would be loaded: no weights are needed for the refusal.
        (
            "/v1/rerank",
            {"model": RERANKER, "query": "q", "documents": ["d", OVER]},
            "INVALID_INPUT",
            "documents[1]",
        ),
    ],
    ids=["embeddings", "rerank"],
)
def test_item_text_limit_holds_on_the_openai_style_routes(
    small_server, path: str, body: dict[str, Any], code: str, field: str
) -> None:
    response = post_json(small_server.client, body, path)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["message"]) == (code, item_over(field))
    small_server.assert_serving()
