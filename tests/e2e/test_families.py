"""Sparse, multivector, MUVERA, BGE-M3 and reranking through a real server, over msgpack and JSON.

The ``families`` server (tests/e2e/conftest.py) serves the packaged models plus test models built
from configs. Values are held to the reference libraries in tests/adapters; here the wire shapes, the
options and the errors are checked, plus what real weights must do (the relevant document ranks
first).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from sentence_transformers import CrossEncoder

from sie.adapters.causal_reranker import CausalLmReranker
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.jina_colbert import JinaColbertEncoder
from sie.core.options import Capability, ComputePrecision
from sie.postprocess.muvera import Muvera, MuveraConfig
from tests import builders
from tests.conftest import package_folder
from tests.e2e.conftest import (
    CAUSAL_RERANKER,
    COLBERT,
    DOCS,
    JINA_COLBERT,
    M3,
    MINILM,
    MSGPACK_HEADERS,
    QUERY,
    RERANKER,
    SPLADE,
    ZERANK,
    Server,
)


def post(server: Server, path: str, body: dict[str, Any], unpack: Any) -> Any:
    response = server.client.post(path, content=msgpack.packb(body), headers=MSGPACK_HEADERS)
    assert response.status_code == 200, response.text
    return unpack(response.content)


def error(server: Server, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = server.client.post(path, json=body)
    return response.status_code, response.json()


def test_splade_sparse_wire_shape_and_float16(families: Server, unpack: Any) -> None:
    body = {"items": [{"text": QUERY}], "params": {"output_types": ["sparse"]}}
    (item,) = post(families, f"/v1/encode/{SPLADE}", body, unpack)["items"]
    sparse = item["sparse"]
    assert set(sparse) == {"dims", "dtype", "indices", "values"} and sparse["dims"] == 30522
    assert sparse["dtype"] == "float32" and sparse["values"].dtype == np.float32
    assert len(sparse["indices"]) == len(sparse["values"]) > 5
    body["params"]["output_dtype"] = "float16"
    (half,) = post(families, f"/v1/encode/{SPLADE}", body, unpack)["items"]
    assert half["sparse"]["dtype"] == "float16" and half["sparse"]["values"].dtype == np.float16
    np.testing.assert_array_equal(half["sparse"]["indices"], sparse["indices"])
    np.testing.assert_allclose(half["sparse"]["values"], sparse["values"], rtol=1e-3)


def test_packaged_splade_ranks_the_relevant_document_first(families: Server, unpack: Any) -> None:
    body = {
        "query": {"text": QUERY},
        "items": [{"text": d} for d in DOCS],
        "options": {"score_mode": "sparse"},
    }
    result = post(families, f"/v1/score/{SPLADE}", body, unpack)
    assert result["scores"][0]["item_id"] == "item-1" and result["scores"][0]["score"] > 1.0


def test_dense_score_mode_on_minilm_ranks_the_relevant_passage_first(families: Server, unpack: Any) -> None:
    body = {
        "query": {"text": QUERY, "id": "q"},
        "items": [{"text": d, "id": f"d{i}"} for i, d in enumerate(DOCS)],
        "options": {"score_mode": "dense"},
    }
    result = post(families, f"/v1/score/{MINILM}", body, unpack)
    assert result["query_id"] == "q"
    assert [s["rank"] for s in result["scores"]] == [0, 1, 2]
    assert result["scores"][0]["item_id"] == "d1"
    assert result["usage"]["input_tokens"] > 0


def test_cross_encoder_scores_sorted_and_equal_to_sentence_transformers(
    families: Server, unpack: Any, tmp_path: Path
) -> None:
    body = {
        "query": {"text": QUERY},
        "items": [{"text": DOCS[0]}, {"text": DOCS[1], "id": "x"}, {"text": DOCS[2]}],
    }
    result = post(families, f"/v1/score/{RERANKER}", body, unpack)
    assert list(result) == ["model", "query_id", "scores", "usage"] and result["query_id"] is None
    folder = builders.bert_reranker(package_folder("cognition", "model"), tmp_path / "reranker")
    expected = CrossEncoder(str(folder), device="cpu").predict([(QUERY, d) for d in DOCS])
    ids = ["item-0", "x", "item-2"]
    order = np.argsort(-expected, kind="stable")
    assert [s["item_id"] for s in result["scores"]] == [ids[i] for i in order]
    np.testing.assert_allclose([s["score"] for s in result["scores"]], expected[order], atol=1e-5)


def test_a_score_requests_instruction_reaches_the_cross_encoder(
    families: Server, unpack: Any, tmp_path: Path
) -> None:
    body = {"query": {"text": QUERY}, "items": [{"text": d, "id": f"d{i}"} for i, d in enumerate(DOCS)]}
    plain = post(families, f"/v1/score/{RERANKER}", body, unpack)
    instructed = post(families, f"/v1/score/{RERANKER}", {**body, "instruction": "Find the cause"}, unpack)
    folder = builders.bert_reranker(package_folder("cognition", "model"), tmp_path / "reranker")
    expected = CrossEncoder(str(folder), device="cpu").predict([(f"Find the cause {QUERY}", d) for d in DOCS])
    got = {s["item_id"]: s["score"] for s in instructed["scores"]}
    np.testing.assert_allclose([got[f"d{i}"] for i in range(len(DOCS))], expected, atol=1e-5)
    assert got != {s["item_id"]: s["score"] for s in plain["scores"]}


def test_causal_lm_reranker_under_its_public_name_scores_as_the_adapter(
    families: Server, unpack: Any, family_folders: dict[str, Path]
) -> None:
    """A Qwen3-Reranker YAML naming the public adapter serves through our class: the server's scores
    are the adapter's (held to the model card's recipe in tests/adapters/test_causal_reranker.py)."""
    body = {"query": {"text": QUERY}, "items": [{"text": d, "id": f"d{i}"} for i, d in enumerate(DOCS)]}
    result = post(families, f"/v1/score/{CAUSAL_RERANKER}", body, unpack)
    loadtime = {"yes_token": "yes", "no_token": "no", "input_format": "qwen3", "score_mode": "log_softmax"}
    spec = LoadSpec(family_folders["qwen3_reranker"], "cpu", ComputePrecision.FLOAT32, 256, loadtime=loadtime)
    reranker = CausalLmReranker.load(spec)
    forward = Forward(frozenset({Capability.SCORE}))
    expected = reranker.run(reranker.prepare([(QUERY, d) for d in DOCS], forward), forward).scores
    assert expected is not None
    got = {s["item_id"]: s["score"] for s in result["scores"]}
    np.testing.assert_allclose([got[f"d{i}"] for i in range(len(DOCS))], expected, atol=1e-5)
    assert [s["rank"] for s in result["scores"]] == list(range(len(DOCS)))


def test_zerank_under_its_public_id_scores_as_its_cross_encoder(
    families: Server, unpack: Any, family_folders: dict[str, Path]
) -> None:
    """The shipped zerank-2 YAML on a built sentence-transformers causal CrossEncoder: the server's
    scores are the library's ``predict`` (raw logits of the one token, identity activation)."""
    body = {"query": {"text": QUERY}, "items": [{"text": d, "id": f"d{i}"} for i, d in enumerate(DOCS)]}
    result = post(families, f"/v1/score/{ZERANK}", body, unpack)
    expected = CrossEncoder(str(family_folders["zerank"]), device="cpu").predict([(QUERY, d) for d in DOCS])
    got = {s["item_id"]: s["score"] for s in result["scores"]}
    np.testing.assert_allclose([got[f"d{i}"] for i in range(len(DOCS))], expected, atol=1e-5)


def test_rerank_route_top_n_and_documents(families: Server) -> None:
    scores = families.client.post(
        f"/v1/score/{RERANKER}",
        json={"query": {"text": QUERY}, "items": [{"text": d} for d in DOCS]},
        headers={"accept": "application/json"},
    ).json()["scores"]
    response = families.client.post(
        "/v1/rerank",
        json={
            "model": RERANKER,
            "query": QUERY,
            "documents": [DOCS[0], {"text": DOCS[1]}, DOCS[2]],
            "top_n": 2,
            "return_documents": True,
        },
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert [r["index"] for r in body["results"]] == [int(s["item_id"][5:]) for s in scores[:2]]
    assert [r["document"]["text"] for r in body["results"]] == [DOCS[r["index"]] for r in body["results"]]
    assert body["usage"]["input_tokens"] > 0 and body["model"] == RERANKER


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"model": RERANKER, "query": "q", "documents": ["a"], "top_n": 0}, 400, "top_n"),
        ({"model": RERANKER, "query": "q", "documents": [1, 2]}, 400, "documents"),
        ({"model": RERANKER, "query": "q", "documents": []}, 400, "must not be empty"),
        ({"model": MINILM, "query": "q", "documents": ["a"]}, 400, "does not support reranking"),
        ({"model": "nobody/nothing", "query": "q", "documents": ["a"]}, 404, "not found"),
    ],
)
def test_rerank_bad_input(families: Server, body: dict[str, Any], status: int, fragment: str) -> None:
    code, payload = error(families, "/v1/rerank", body)
    assert code == status and fragment in payload["error"]["message"]
    families.assert_serving()


def test_colbert_multivector_shape_dtypes_and_query_expansion(families: Server, unpack: Any) -> None:
    items = [{"text": QUERY}]
    base = {"output_types": ["multivector"]}
    (query,) = post(
        families,
        f"/v1/encode/{COLBERT}",
        {"items": items, "params": {**base, "options": {"is_query": True}}},
        unpack,
    )["items"]
    multi = query["multivector"]
    assert set(multi) == {"token_dims", "num_tokens", "dtype", "values"}
    assert multi["token_dims"] == builders.COLBERT_TOKEN_DIM and multi["num_tokens"] == 16
    assert multi["values"].shape == (16, builders.COLBERT_TOKEN_DIM)
    np.testing.assert_allclose(np.linalg.norm(multi["values"], axis=1), 1.0, atol=1e-5)
    (int8,) = post(
        families,
        f"/v1/encode/{COLBERT}",
        {"items": items, "params": {**base, "output_dtype": "int8", "options": {"is_query": True}}},
        unpack,
    )["items"]
    assert int8["multivector"]["dtype"] == "int8" and int8["multivector"]["values"].shape == (
        16,
        builders.COLBERT_TOKEN_DIM,
    )


def test_colbert_reads_the_requests_sequence_lengths_as_the_public_server(
    families: Server, unpack: Any
) -> None:
    """``query_max_length`` cuts an expanded query below the model's 16, ``max_seq_length`` a
    document; a length past the model's keeps its own; a score (jina-colbert-v2's) keeps each side to
    its length."""
    document = " ".join(["blood pressure rises with salt"] * 8)

    def tokens(text: str, options: dict[str, Any]) -> int:
        body = {"items": [{"text": text}], "params": {"output_types": ["multivector"], "options": options}}
        (item,) = post(families, f"/v1/encode/{COLBERT}", body, unpack)["items"]
        return int(item["multivector"]["num_tokens"])

    assert tokens(QUERY, {"is_query": True, "query_max_length": 6}) == 6
    assert tokens(QUERY, {"is_query": True, "query_max_length": 500}) == 16
    assert tokens(QUERY, {"is_query": True, "query_max_length": "not a length"}) == 16
    whole = tokens(document, {})
    assert tokens(document, {"max_seq_length": 10}) <= 10 < whole
    score = {"query": {"text": QUERY}, "items": [{"text": document}]}
    full = post(families, f"/v1/score/{JINA_COLBERT}", score, unpack)["scores"][0]["score"]
    short = post(
        families,
        f"/v1/score/{JINA_COLBERT}",
        {**score, "options": {"query_max_length": 4, "max_seq_length": 6}},
        unpack,
    )["scores"][0]["score"]
    assert short != full


@pytest.mark.parametrize("is_query", [True, False])
def test_muvera_profile_equals_muvera_of_the_multivector(
    families: Server, unpack: Any, is_query: bool
) -> None:
    options = {"is_query": is_query}
    items = [{"text": t} for t in DOCS]
    multi = post(
        families,
        f"/v1/encode/{COLBERT}",
        {"items": items, "params": {"output_types": ["multivector"], "options": options}},
        unpack,
    )
    fixed = post(
        families, f"/v1/encode/{COLBERT}:muvera", {"items": items, "params": {"options": options}}, unpack
    )
    via_option = post(
        families,
        f"/v1/encode/{COLBERT}",
        {"items": items, "params": {"options": {**options, "profile": "muvera"}}},
        unpack,
    )
    muvera = Muvera(MuveraConfig(), builders.COLBERT_TOKEN_DIM)
    for m, f, v in zip(multi["items"], fixed["items"], via_option["items"], strict=True):
        assert set(f) == {"dense"} and f["dense"]["dims"] == 10240
        expected = muvera.encode(m["multivector"]["values"], is_query=is_query)
        np.testing.assert_allclose(f["dense"]["values"], expected, atol=1e-5)
        np.testing.assert_array_equal(v["dense"]["values"], f["dense"]["values"])


def test_bge_m3_outputs_from_one_request_and_default_dense_score(families: Server, unpack: Any) -> None:
    body = {
        "items": [{"text": QUERY, "id": "a"}],
        "params": {"output_types": ["dense", "sparse", "multivector"]},
    }
    (item,) = post(families, f"/v1/encode/{M3}", body, unpack)["items"]
    assert list(item) == ["id", "dense", "sparse", "multivector"]
    assert (
        item["dense"]["dims"] == 64
        and item["sparse"]["dims"] == 30522
        and item["multivector"]["token_dims"] == 64
    )
    (sparse_only,) = post(families, f"/v1/encode/{M3}:sparse", {"items": [{"text": QUERY}]}, unpack)["items"]
    assert list(sparse_only) == ["sparse"]
    np.testing.assert_array_equal(sparse_only["sparse"]["indices"], item["sparse"]["indices"])
    scored = post(
        families, f"/v1/score/{M3}", {"query": {"text": QUERY}, "items": [{"text": d} for d in DOCS]}, unpack
    )
    dense = post(families, f"/v1/encode/{M3}", {"items": [{"text": d} for d in DOCS]}, unpack)["items"]
    (q,) = post(
        families,
        f"/v1/encode/{M3}",
        {"items": [{"text": QUERY}], "params": {"options": {"is_query": True}}},
        unpack,
    )["items"]
    cosines = np.array([float(q["dense"]["values"] @ d["dense"]["values"]) for d in dense])
    np.testing.assert_allclose(sorted(s["score"] for s in scored["scores"]), sorted(cosines), atol=1e-5)
    hybrid = post(
        families,
        f"/v1/score/{M3}",
        {
            "query": {"text": QUERY},
            "items": [{"text": d} for d in DOCS],
            "options": {"score_mode": "hybrid", "score_weights": {"dense": 1, "sparse": 0, "colbert": 0}},
        },
        unpack,
    )
    assert [s["item_id"] for s in hybrid["scores"]] == [s["item_id"] for s in scored["scores"]]


@pytest.mark.parametrize(
    ("path", "body", "fragment"),
    [
        (f"/v1/score/{RERANKER}", {"query": {"text": "q"}, "items": []}, "must not be empty"),
        (f"/v1/score/{RERANKER}", {"items": [{"text": "a"}]}, "missing required field `query`"),
        (
            f"/v1/score/{MINILM}",
            {"query": {"text": "q"}, "items": [{"text": "a"}]},
            "does not support scoring",
        ),
        (
            f"/v1/score/{MINILM}",
            {"query": {"text": "q"}, "items": [{"text": "a"}], "options": {"score_mode": "sparse"}},
            "needs the sparse output",
        ),
        (
            f"/v1/score/{MINILM}",
            {"query": {"text": "q"}, "items": [{"text": "a"}], "options": {"score_mode": "psychic"}},
            "Unknown score_mode",
        ),
        (
            f"/v1/encode/{MINILM}",
            {"items": [{"text": "a"}], "params": {"output_types": ["sparse"]}},
            "does not support output types",
        ),
        (f"/v1/encode/{RERANKER}", {"items": [{"text": "a"}]}, "does not support output types"),
        (  # a text cross-encoder reads no images: an image-only document is not scored as "None"
            f"/v1/score/{RERANKER}",
            {"query": {"text": "q"}, "items": [{"images": [{"data": "iVBORw==", "format": "png"}]}]},
            "Score requires text on the query and on every item",
        ),
        (
            f"/v1/encode/{COLBERT}",
            {"items": [{"text": "a"}], "params": {"options": {"profile": "nope"}}},
            "Unknown profile",
        ),
        (
            f"/v1/encode/{SPLADE}",
            {"items": [{"text": "a"}], "params": {"output_types": ["sparse"], "output_dtype": "int8"}},
            "float32 or float16",
        ),
    ],
)
def test_bad_input_is_a_clear_400(families: Server, path: str, body: dict[str, Any], fragment: str) -> None:
    status, payload = error(families, path, body)
    assert status == 400 and payload["detail"]["code"] == "INVALID_INPUT", payload
    assert fragment in payload["detail"]["message"]
    families.assert_serving()


def test_similarity_scoring_prepares_texts_like_encode(families: Server, unpack: Any) -> None:
    """The query gets the instruction and ``is_query`` (templates included), the items do not."""
    options = {
        "score_mode": "dense",
        "query_template": "query: {instruction} {text}",
        "doc_template": "passage: {text}",
    }
    body = {
        "query": {"text": QUERY},
        "items": [{"text": DOCS[1]}],
        "instruction": "find causes",
        "options": options,
    }
    (scored,) = post(families, f"/v1/score/{MINILM}", body, unpack)["scores"]
    encode_options = {k: v for k, v in options.items() if k != "score_mode"}
    (query,) = post(
        families,
        f"/v1/encode/{MINILM}",
        {
            "items": [{"text": QUERY}],
            "params": {"instruction": "find causes", "options": {**encode_options, "is_query": True}},
        },
        unpack,
    )["items"]
    (doc,) = post(
        families,
        f"/v1/encode/{MINILM}",
        {"items": [{"text": DOCS[1]}], "params": {"options": encode_options}},
        unpack,
    )["items"]
    plain = post(
        families,
        f"/v1/score/{MINILM}",
        {**body, "instruction": None, "options": {"score_mode": "dense"}},
        unpack,
    )
    expected = float(query["dense"]["values"] @ doc["dense"]["values"])
    assert abs(scored["score"] - expected) < 1e-5
    assert abs(plain["scores"][0]["score"] - expected) > 1e-3  # the instruction and templates changed it


OUTPUT = {SPLADE: "sparse", COLBERT: "multivector", MINILM: "dense"}


@pytest.mark.parametrize(
    ("model", "family"), [(SPLADE, "SPLADE"), (COLBERT, "ColBERT"), (MINILM, "SentenceTransformer")]
)
def test_an_item_without_text_names_the_models_family(families: Server, model: str, family: str) -> None:
    status, payload = error(
        families, f"/v1/encode/{model}", {"items": [{"id": "x"}], "params": {"output_types": [OUTPUT[model]]}}
    )
    assert status == 400 and payload["detail"]["message"] == f"{family} adapters requires text input"


def test_jina_colbert_under_its_public_id_encodes_and_scores_as_the_adapter(
    families: Server, unpack: Any, families_models: Path, family_folders: dict[str, Path]
) -> None:
    """The shipped jina-colbert-v2 YAML (markers, 32-token expanded queries, 300-token documents, 128
    dims) on built weights: queries and documents equal the adapter's, and ``/v1/score`` ranks the
    documents by MaxSim over them (averaged over the query tokens)."""
    from sie.catalog.model_config import load_model_config

    config = load_model_config(families_models / "jinaai__jina-colbert-v2.yaml")
    loadtime = dict(config.resolve_profile("default").loadtime)
    spec = LoadSpec(
        family_folders["jina_colbert"], "cpu", ComputePrecision.FLOAT32, config.max_sequence_length, loadtime
    )
    adapter = JinaColbertEncoder.load(spec)
    vectors = {}
    for is_query, texts in ((True, [QUERY]), (False, DOCS)):
        body = {
            "items": [{"text": t} for t in texts],
            "params": {"output_types": ["multivector"], "options": {"is_query": is_query}},
        }
        items = post(families, f"/v1/encode/{JINA_COLBERT}", body, unpack)["items"]
        forward = Forward(frozenset({Capability.MULTIVECTOR}), is_query=is_query)
        expected = adapter.run(adapter.prepare(texts, forward), forward).multivector or []
        for item, want in zip(items, expected, strict=True):
            assert item["multivector"]["token_dims"] == 128
            np.testing.assert_allclose(item["multivector"]["values"], want, atol=1e-5)
        vectors[is_query] = expected
    assert vectors[True][0].shape[0] == 32  # [CLS], [QueryMarker], the query, [SEP], then [MASK]s
    body = {"query": {"text": QUERY}, "items": [{"text": d} for d in DOCS]}
    scores = post(families, f"/v1/score/{JINA_COLBERT}", body, unpack)["scores"]
    maxsim = [float((vectors[True][0] @ doc.T).max(axis=1).mean()) for doc in vectors[False]]
    assert [s["item_id"] for s in scores] == [f"item-{i}" for i in np.argsort(maxsim)[::-1]]
    np.testing.assert_allclose([s["score"] for s in scores], sorted(maxsim, reverse=True), rtol=1e-4)
