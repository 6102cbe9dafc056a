"""``usage`` on encode, score and extract responses, through a standalone server (the session's
``families``) and through a cluster (the session's ``queue_cluster``: the gateway, a real nats-server,
two queue workers), JSON and msgpack, read by the public ``sie-sdk``.

Every count is checked against the tokenizer itself (the packaged MiniLM's; the tiny BERT's that the
built reranker, Qwen3-shaped reranker and CLIP share), never against the server's own arithmetic:
``input_tokens`` is each text's (or pair's) ids with the special tokens, after truncation;
``images`` the images read, on a model that takes images; ``content_tokens`` each part of a scored
pair tokenized alone. The same numbers come back as the ``X-SIE-Units-*`` headers the public SDK
reads into a result's ``request["usage"]``.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest
from tokenizers import Tokenizer

from sie.sdk import Item, SIEClient
from tests.conftest import random_png
from tests.e2e.cluster import Gateway
from tests.e2e.conftest import (
    CAUSAL_RERANKER,
    CLIP,
    DOCS,
    M3,
    MINILM,
    OWLV2,
    QUERY,
    RERANKER,
    Server,
    tiny_bert_dir,
)

TEXTS = ["first document", "a second, somewhat longer document about blood pressure", "x"]
INSTRUCTION = "Find the medical cause"
LONG_DOCUMENT = " ".join(["pressure"] * 400)  # past the reranker's 256 tokens: the document is cut


@pytest.fixture(params=["server", "gateway"])
def url(request: pytest.FixtureRequest, families: Server, gateway: Gateway) -> str:
    """The standalone families server, or the shared cluster's gateway: both serve these models
    (tests/e2e/conftest.py), at float32."""
    return families.url if request.param == "server" else gateway.url


@pytest.fixture(scope="module")
def bert() -> Tokenizer:
    """The tiny BERT's WordPiece tokenizer, whole (no truncation): the built models' own."""
    tokenizer = Tokenizer.from_file(str(tiny_bert_dir() / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


@pytest.fixture(scope="module")
def minilm(minilm_dir: Path) -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()  # its file pads every text to 128
    return tokenizer


def alone(tokenizer: Tokenizer, text: str) -> int:
    """A text's own tokens: no special tokens, no template."""
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def post(url: str, route: str, model: str, body: dict[str, Any], as_json: bool) -> httpx.Response:
    accept = "application/json" if as_json else "application/msgpack"
    response = httpx.post(f"{url}/v1/{route}/{model}", json=body, headers={"accept": accept}, timeout=120)
    assert response.status_code == 200, response.text
    return response


def answer(response: httpx.Response) -> Any:
    if response.headers["content-type"].startswith("application/json"):
        return response.json()
    return msgpack.unpackb(response.content, raw=False, strict_map_key=False)


def units(response: httpx.Response) -> dict[str, int]:
    prefix = "x-sie-units-"
    return {k.removeprefix(prefix): int(v) for k, v in response.headers.items() if k.startswith(prefix)}


@pytest.mark.parametrize("as_json", [True, False])
def test_encode_bills_each_texts_tokens_with_its_special_tokens(
    url: str, minilm: Tokenizer, as_json: bool
) -> None:
    items = [{"text": t} for t in TEXTS]
    response = post(url, "encode", MINILM, {"items": items}, as_json)
    body = answer(response)
    expected = sum(len(minilm.encode(t).ids) for t in TEXTS)  # [CLS] ... [SEP] each
    assert list(body) == ["model", "items", "timing", "usage"]
    assert body["usage"] == {"input_tokens": expected}  # a text model counts no images
    assert units(response) == {"input-tokens": expected}


def test_encode_counts_images_on_a_model_that_takes_them(url: str, bert: Tokenizer) -> None:
    caption = {"text": "a red bicycle"}
    picture = {"images": [{"data": random_png(40, 30, seed=7), "format": "png"}]}
    response = httpx.post(
        f"{url}/v1/encode/{CLIP}",
        content=msgpack.packb({"items": [caption, picture]}),
        headers={"content-type": "application/msgpack", "accept": "application/json"},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    text_tokens = len(bert.encode("a red bicycle").ids)  # the image reads no text
    assert response.json()["usage"] == {"input_tokens": text_tokens, "images": 1}
    assert units(response) == {"input-tokens": text_tokens, "images": 1}
    only_text = post(url, "encode", CLIP, {"items": [caption]}, as_json=True)
    assert answer(only_text)["usage"] == {"input_tokens": text_tokens, "images": 0}  # counted: none


@pytest.mark.parametrize("as_json", [True, False])
def test_extract_counts_the_images_and_the_label_queries_each_is_read_with(
    url: str, bert: Tokenizer, as_json: bool
) -> None:
    """An OWLv2 image item bills the label queries its text tower reads with it (each query's ids
    with [CLS] and [SEP], cut at OWL's 16 positions), never its patches; ``images`` counts the images."""
    import base64

    labels = ["cat", "a remote control lying next to a very long sofa in a bright living room"]
    pictures = [random_png(48, 40, 0), random_png(30, 64, 1), random_png(32, 32, 2)]
    images = [{"data": base64.b64encode(p).decode(), "format": "png"} for p in pictures]
    body = {"items": [{"images": [image]} for image in images], "params": {"labels": labels}}
    response = post(url, "extract", OWLV2, body, as_json)
    queries = [len(bert.encode(f"a photo of {label}").ids) for label in labels]
    assert queries[1] > 16  # the long one is read cut
    tokens = len(pictures) * (queries[0] + 16)
    assert answer(response)["usage"] == {"input_tokens": tokens, "images": len(pictures)}
    assert units(response) == {"input-tokens": tokens, "images": len(pictures)}


@pytest.mark.parametrize("as_json", [True, False])
def test_cross_encoder_score_tells_the_content_inside_its_template(
    url: str, bert: Tokenizer, as_json: bool
) -> None:
    documents = [*DOCS, LONG_DOCUMENT]
    body = {"query": {"text": QUERY}, "items": [{"text": d} for d in documents]}
    got = answer(post(url, "score", RERANKER, body, as_json))["usage"]
    pairs = [bert.encode(QUERY, d).ids for d in DOCS]
    cut = 256  # the reranker's max_sequence_length: the long document keeps what fits
    whole = sum(map(len, pairs)) + cut
    content = sum(alone(bert, QUERY) + alone(bert, d) for d in DOCS) + (cut - 3)  # [CLS] [SEP] [SEP]
    assert alone(bert, LONG_DOCUMENT) + alone(bert, QUERY) > cut - 3
    assert got == {"input_tokens": whole, "input_tokens_details": {"content_tokens": content}}

    asked = post(
        url, "score", RERANKER, {**body, "items": body["items"][:3], "instruction": INSTRUCTION}, as_json
    )
    instructed = sum(alone(bert, INSTRUCTION) + alone(bert, QUERY) + alone(bert, d) for d in DOCS)
    assert answer(asked)["usage"]["input_tokens_details"] == {"content_tokens": instructed}
    assert units(asked)["content-input-tokens"] == instructed


def test_causal_reranker_score_counts_the_prompt_as_template(url: str, bert: Tokenizer) -> None:
    body = {"query": {"text": QUERY}, "items": [{"text": d} for d in DOCS]}
    usage = answer(post(url, "score", CAUSAL_RERANKER, body, as_json=True))["usage"]
    content = sum(alone(bert, QUERY) + alone(bert, d) for d in DOCS)  # the default instruction is template
    assert usage["input_tokens_details"] == {"content_tokens": content}
    assert usage["input_tokens"] > content and set(usage) == {"input_tokens", "input_tokens_details"}
    asked = answer(post(url, "score", CAUSAL_RERANKER, {**body, "instruction": INSTRUCTION}, as_json=True))
    assert asked["usage"]["input_tokens_details"] == {
        "content_tokens": content + 3 * alone(bert, INSTRUCTION)
    }


def test_embedding_score_bills_the_query_once_per_document(url: str, bert: Tokenizer) -> None:
    body = {"query": {"text": QUERY}, "items": [{"text": d} for d in DOCS]}
    usage = answer(post(url, "score", M3, body, as_json=True))["usage"]
    expected = len(DOCS) * len(bert.encode(QUERY).ids) + sum(len(bert.encode(d).ids) for d in DOCS)
    assert usage == {"input_tokens": expected}  # no template, so no breakdown


PUBLIC_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from sie_sdk import SIEClient

    url, encoder, reranker, texts, query, docs = sys.argv[1:7]
    texts, docs = json.loads(texts), json.loads(docs)
    with SIEClient(url, timeout_s=120) as client:
        encoded = client.encode(encoder, [{"text": t} for t in texts])
        scored = client.score(reranker, {"text": query}, [{"text": d} for d in docs])
    print(json.dumps({
        "encode": [r.get("request", {}).get("usage") for r in encoded],
        "score": scored.get("usage"),
        "score_request": scored.get("request", {}).get("usage"),
    }))
    """
)


def test_the_public_sdk_reads_usage_from_encode_and_score(
    url: str, run_public_sdk: Any, minilm: Tokenizer, bert: Tokenizer
) -> None:
    out = run_public_sdk(PUBLIC_SCRIPT, url, MINILM, RERANKER, json.dumps(TEXTS), QUERY, json.dumps(DOCS))
    tokens = sum(len(minilm.encode(t).ids) for t in TEXTS)
    assert out["encode"] == [{"input_tokens": tokens}] * len(TEXTS)  # request-wide, on every result
    whole = sum(len(bert.encode(QUERY, d).ids) for d in DOCS)
    content = sum(alone(bert, QUERY) + alone(bert, d) for d in DOCS)
    assert out["score"] == {"input_tokens": whole, "input_tokens_details": {"content_tokens": content}}
    assert out["score_request"] == {"input_tokens": whole, "content_input_tokens": content}


def test_our_sdk_reads_usage_as_the_public_one(url: str, minilm: Tokenizer, bert: Tokenizer) -> None:
    with SIEClient(url, timeout_s=120) as client:
        encoded = client.encode(MINILM, [Item(text=t) for t in TEXTS])
        scored = client.score(RERANKER, Item(text=QUERY), [Item(text=d) for d in DOCS])
    tokens = sum(len(minilm.encode(t).ids) for t in TEXTS)
    assert [r["request"]["usage"] for r in encoded] == [{"input_tokens": tokens}] * len(TEXTS)
    encoded[0]["request"]["usage"]["input_tokens"] = 0  # each result holds its own copy
    assert encoded[1]["request"]["usage"] == {"input_tokens": tokens}
    content = sum(alone(bert, QUERY) + alone(bert, d) for d in DOCS)
    assert scored["usage"]["input_tokens_details"] == {"content_tokens": content}
    assert scored["request"]["usage"]["content_input_tokens"] == content
