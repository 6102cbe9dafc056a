"""The PUBLIC ``sie-sdk==0.10.1`` (PyPI) against our server, compared with our own ``sie.sdk``.

The public SDK needs Python >= 3.12, so it runs in the public venv (``run_public_sdk`` of
``tests/conftest.py``, which builds ``$SIE_PUBLIC_VENV`` once from requirements/public-lock.txt). One
script run in that venv makes every call and prints the results as JSON; the tests then make the same
calls with our SDK and compare. The script also calls a model that is not preloaded: the public SDK must get through the
server's ``503 MODEL_LOADING`` + ``Retry-After`` on its own.

The second half does the same against the ``families`` server (tests/e2e/conftest.py) for every
other output: SPLADE sparse, ColBERT multivectors and their MUVERA dense form, BGE-M3's three outputs,
int8/float16 output dtypes, ``score`` (cross-encoder, and embedding models scoring by similarity),
``extract`` (GLiNER entities) and Qwen3-VL's embedder (with an instruction) and reranker.
"""

from __future__ import annotations

import inspect
import json
import re
import textwrap
from typing import Any

import httpx
import numpy as np
import pytest
from sentence_transformers import CrossEncoder

from tests.e2e.conftest import (
    CAUSAL_RERANKER,
    COLBERT,
    GLICLASS,
    GLINER,
    M3,
    MINILM,
    QWEN3_VL_EMBEDDING,
    QWEN3_VL_RERANKER,
    RERANKER,
    SPLADE,
)
from tests.e2e.conftest import DOCS as FAMILY_DOCS
from tests.e2e.conftest import QUERY as FAMILY_QUERY

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
COLD_MODEL = "senthilthepro/sre-embedding-model"
OUTPUT_DTYPES = ["float32", "float16", "int8", "uint8", "binary"]
ITEMS = [{"text": "first document", "id": "a"}, {"text": "second document"}, {"text": "third", "id": "c"}]

# Every call the comparison covers: (name, model, items, keyword arguments). The script and the tests
# both read this list, so the two SDKs make exactly the same calls.
CALLS: list[tuple[str, str, Any, dict[str, Any]]] = [
    ("single", MODEL, {"text": "hello world"}, {}),
    ("single-with-id", MODEL, {"text": "hello world", "id": "only"}, {}),
    ("list", MODEL, ITEMS, {}),
    ("list-query", MODEL, ITEMS, {"is_query": True}),
    *(
        (f"dtype-{d}", MODEL, [{"text": "hello world", "id": "q"}], {"output_dtype": d})
        for d in OUTPUT_DTYPES
    ),
    ("query-int8", MODEL, ITEMS[:2], {"is_query": True, "output_dtype": "int8"}),
]

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from sie_sdk import SIEClient

    url, calls, cold_model = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]

    def dump(result):
        dense = result["dense"]
        return {
            "keys": sorted(result),
            "id": result.get("id"),
            "model": result.get("model"),
            "request": result.get("request"),
            "dtype": str(dense.dtype),
            "shape": list(dense.shape),
            "dense": dense.tolist(),
        }

    out = {}
    with SIEClient(url, timeout_s=120) as client:
        for name, model, items, kwargs in calls:
            result = client.encode(model, items, **kwargs)
            out[name] = [dump(r) for r in result] if isinstance(result, list) else dump(result)
        out["cold"] = dump(client.encode(cold_model, {"text": "disk pressure on the node"}))
    print(json.dumps(out))
    """
)


def _model_state(server, model: str) -> str:
    return server.client.get(f"/v1/models/{model}").json()["state"]


@pytest.fixture(scope="module")
def public_results(server, run_public_sdk) -> dict[str, Any]:
    assert _model_state(server, COLD_MODEL) == "available", (
        "the cold model must not be loaded before this test"
    )
    return run_public_sdk(SCRIPT, server.url, json.dumps(CALLS), COLD_MODEL)


@pytest.fixture(scope="module")
def our_client(server):
    from sie.sdk import SIEClient

    with SIEClient(server.url, timeout_s=120) as client:
        yield client


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _assert_same_vector(public: dict[str, Any], ours: np.ndarray) -> None:
    assert str(ours.dtype) == public["dtype"]
    assert list(ours.shape) == public["shape"]
    expected = np.asarray(public["dense"], dtype=ours.dtype)
    if ours.dtype.kind == "f":
        np.testing.assert_allclose(ours, expected, atol=1e-6)
    else:
        np.testing.assert_array_equal(ours, expected)


@pytest.mark.parametrize(("name", "model", "items", "kwargs"), CALLS, ids=[c[0] for c in CALLS])
def test_our_sdk_returns_what_the_public_sdk_returns(
    public_results, our_client, name, model, items, kwargs
) -> None:
    public = public_results[name]
    ours = our_client.encode(model, items, **kwargs)
    assert isinstance(ours, list) == isinstance(public, list)
    for pub, mine in zip(_as_list(public), _as_list(ours), strict=True):
        assert mine.get("id") == pub["id"]
        assert mine.get("model") == pub["model"]
        _assert_same_vector(pub, mine["dense"])


@pytest.mark.parametrize(("name", "model", "items", "kwargs"), CALLS, ids=[c[0] for c in CALLS])
def test_public_sdk_returns_the_raw_wire_vectors(server, public_results, name, model, items, kwargs) -> None:
    """The public SDK decodes our msgpack into what our JSON says (ids, dtypes and values)."""
    params: dict[str, Any] = {}
    if "output_dtype" in kwargs:
        params["output_dtype"] = kwargs["output_dtype"]
    if kwargs.get("is_query"):
        params["options"] = {"is_query": True}
    body: dict[str, Any] = {"items": _as_list(items)}
    if params:
        body["params"] = params
    response = server.client.post(f"/v1/encode/{model}", json=body, headers={"accept": "application/json"})
    assert response.status_code == 200, response.text
    for pub, raw in zip(_as_list(public_results[name]), response.json()["items"], strict=True):
        assert pub["id"] == raw.get("id")
        np.testing.assert_allclose(
            np.asarray(pub["dense"], dtype=np.float64), raw["dense"]["values"], atol=1e-6
        )


def test_result_keys_match_the_public_sdk(public_results, our_client) -> None:
    """A drop-in client returns the same dict keys (the public one adds ``request`` from headers)."""
    ours = our_client.encode(MODEL, {"text": "hello world", "id": "only"})
    assert sorted(ours) == public_results["single-with-id"]["keys"]


def test_public_sdk_reads_our_identity_headers(server, public_results) -> None:
    instance = server.client.get("/healthz").headers["x-sie-runtime-instance"]
    assert re.match(r"^[0-9a-f]{64}$", instance)
    # usage from the X-SIE-Units-* headers: "hello world" is [CLS] hello world [SEP] to MiniLM
    assert public_results["single"]["request"] == {
        "runtime_instance_id": instance,
        "served_by": "local",
        "usage": {"input_tokens": 4},
    }


def test_public_sdk_retries_model_loading(server, public_results, cosine) -> None:
    cold = public_results["cold"]
    assert cold["model"] == COLD_MODEL
    assert cold["shape"] == [384]
    assert abs(float(np.linalg.norm(cold["dense"])) - 1.0) < 1e-5
    assert _model_state(server, COLD_MODEL) == "loaded"
    # The server said 503 first and the SDK came back on its own (every answer is counted).
    metrics = server.client.get("/metrics").text
    for status in ("503", "200"):
        line = rf'^sie_requests_total\{{endpoint="encode",model="{re.escape(COLD_MODEL)}",status="{status}"\}} [1-9]'
        assert re.search(line, metrics, re.MULTILINE), f"no {status} answer for the cold model counted"
    with httpx.Client(base_url=server.url, timeout=60) as client:
        again = client.post(
            f"/v1/encode/{COLD_MODEL}",
            json={"items": [{"text": "disk pressure on the node"}]},
            headers={"accept": "application/json"},
        )
    assert again.status_code == 200
    assert (
        cosine(np.asarray(cold["dense"]), np.asarray(again.json()["items"][0]["dense"]["values"])) >= 0.99999
    )


# ---------------------------------------------------------------------------------------------------
# Sparse, multivector, MUVERA, BGE-M3 and score through the public SDK (the ``families`` server).
#
# Every result of both SDKs goes through ``to_plain`` (its source is sent to the public SDK's script,
# so both sides flatten the same way): numpy arrays become ``{"ndarray": dtype, "shape", "values"}``,
# everything else stays as it is. The flattened trees must be equal, keys, ids, ranks, dtypes and
# values (float32 survives JSON exactly, so the values are compared exactly).
# ---------------------------------------------------------------------------------------------------


def to_plain(value):
    """A result as JSON-ready Python: arrays keep their dtype and shape next to their values."""
    if hasattr(value, "dtype") and hasattr(value, "tolist"):
        shape = list(getattr(value, "shape", ()))
        return {"ndarray": str(value.dtype), "shape": shape, "values": value.tolist()}
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value


DOC_ITEMS = [{"text": d, "id": f"d{i}"} if i != 1 else {"text": d} for i, d in enumerate(FAMILY_DOCS)]
FAMILY_QUERY_ITEM = {"text": FAMILY_QUERY, "id": "q"}

# (name, operation, model, positional arguments after the model, keyword arguments)
FAMILY_CALLS: list[tuple[str, str, str, list[Any], dict[str, Any]]] = [
    ("splade-sparse", "encode", SPLADE, [DOC_ITEMS], {"output_types": ["sparse"]}),
    (
        "splade-sparse-query",
        "encode",
        SPLADE,
        [FAMILY_QUERY_ITEM],
        {"output_types": ["sparse"], "is_query": True},
    ),
    (
        "splade-sparse-f16",
        "encode",
        SPLADE,
        [DOC_ITEMS],
        {"output_types": ["sparse"], "output_dtype": "float16"},
    ),
    ("colbert-multi", "encode", COLBERT, [DOC_ITEMS], {"output_types": ["multivector"]}),
    (
        "colbert-multi-query",
        "encode",
        COLBERT,
        [[FAMILY_QUERY_ITEM]],
        {"output_types": ["multivector"], "options": {"is_query": True}},
    ),
    (
        "colbert-multi-int8",
        "encode",
        COLBERT,
        [DOC_ITEMS],
        {"output_types": ["multivector"], "output_dtype": "int8"},
    ),
    (
        "colbert-multi-f16",
        "encode",
        COLBERT,
        [FAMILY_QUERY_ITEM],
        {"output_types": ["multivector"], "output_dtype": "float16", "is_query": True},
    ),
    ("colbert-muvera", "encode", f"{COLBERT}:muvera", [DOC_ITEMS], {}),
    ("colbert-muvera-query", "encode", f"{COLBERT}:muvera", [FAMILY_QUERY_ITEM], {"is_query": True}),
    ("colbert-muvera-option", "encode", COLBERT, [DOC_ITEMS], {"options": {"profile": "muvera"}}),
    ("colbert-muvera-int8", "encode", f"{COLBERT}:muvera", [DOC_ITEMS], {"output_dtype": "int8"}),
    ("m3-all", "encode", M3, [DOC_ITEMS], {"output_types": ["dense", "sparse", "multivector"]}),
    ("m3-sparse-multi", "encode", M3, [DOC_ITEMS], {"output_types": ["sparse", "multivector"]}),
    (
        "m3-all-query-f16",
        "encode",
        M3,
        [FAMILY_QUERY_ITEM],
        {"output_types": ["dense", "sparse", "multivector"], "output_dtype": "float16", "is_query": True},
    ),
    ("m3-dense-int8", "encode", M3, [DOC_ITEMS], {"output_dtype": "int8"}),
    ("m3-sparse-profile", "encode", f"{M3}:sparse", [DOC_ITEMS], {}),
    ("m3-default", "encode", M3, [DOC_ITEMS[:2]], {}),
    ("rerank", "score", RERANKER, [FAMILY_QUERY_ITEM, DOC_ITEMS], {}),
    ("qwen3-vl-embed", "encode", QWEN3_VL_EMBEDDING, [DOC_ITEMS], {"instruction": "Find the passage"}),
    ("qwen3-vl-rerank", "score", QWEN3_VL_RERANKER, [FAMILY_QUERY_ITEM, DOC_ITEMS], {}),
    ("causal-rerank", "score", CAUSAL_RERANKER, [FAMILY_QUERY_ITEM, DOC_ITEMS], {}),
    (
        "gliclass-extract",
        "extract",
        GLICLASS,
        [DOC_ITEMS],
        {"labels": ["health", "food", "sports"], "instruction": "Pick the topic"},
    ),
    (
        "gliclass-multi-label",
        "extract",
        f"{GLICLASS}:multi-label",
        [DOC_ITEMS],
        {"labels": ["health", "food", "sports"], "options": {"threshold": 0.3}},
    ),
    ("rerank-no-ids", "score", RERANKER, [{"text": FAMILY_QUERY}, [{"text": d} for d in FAMILY_DOCS]], {}),
    (
        "minilm-dense-score",
        "score",
        MINILM,
        [FAMILY_QUERY_ITEM, DOC_ITEMS],
        {"options": {"score_mode": "dense"}},
    ),
    ("m3-score-default", "score", M3, [FAMILY_QUERY_ITEM, DOC_ITEMS], {}),
    ("m3-score-hybrid", "score", M3, [FAMILY_QUERY_ITEM, DOC_ITEMS], {"options": {"score_mode": "hybrid"}}),
    ("m3-score-maxsim", "score", M3, [FAMILY_QUERY_ITEM, DOC_ITEMS], {"options": {"score_mode": "maxsim"}}),
    (
        "splade-score-sparse",
        "score",
        SPLADE,
        [FAMILY_QUERY_ITEM, DOC_ITEMS],
        {"options": {"score_mode": "sparse"}},
    ),
    (
        "colbert-score-maxsim",
        "score",
        COLBERT,
        [FAMILY_QUERY_ITEM, DOC_ITEMS],
        {"options": {"score_mode": "maxsim"}},
    ),
    (
        "gliner-extract",
        "extract",
        GLINER,
        [DOC_ITEMS],
        {"labels": ["person", "location", "food"], "options": {"threshold": 0.45}},
    ),
    (
        "gliner-extract-single",
        "extract",
        GLINER,
        [{"text": "Alice lives in Paris.", "id": "x1"}],
        {"labels": ["person"], "options": {"threshold": 0.4}},
    ),
]

FAMILY_SCRIPT = textwrap.dedent(inspect.getsource(to_plain)) + textwrap.dedent(
    """
        import json, sys
        from sie_sdk import SIEClient

        url, calls = sys.argv[1], json.loads(sys.argv[2])
        out = {}
        with SIEClient(url, timeout_s=120) as client:
            for name, operation, model, args, kwargs in calls:
                out[name] = to_plain(getattr(client, operation)(model, *args, **kwargs))
        print(json.dumps(out))
        """
)


@pytest.fixture(scope="module")
def public_family_results(families, run_public_sdk) -> dict[str, Any]:
    return run_public_sdk(FAMILY_SCRIPT, families.url, json.dumps(FAMILY_CALLS))


@pytest.fixture(scope="module")
def our_family_client(families):
    from sie.sdk import SIEClient

    with SIEClient(families.url, timeout_s=120) as client:
        yield client


def _timing_keys_only(tree: Any) -> Any:
    """The tree with each ``timing`` block (server milliseconds, different on every call) reduced to
    its sorted keys: both SDKs must report the same timings, not the same numbers."""
    if isinstance(tree, dict):
        return {k: sorted(v) if k == "timing" else _timing_keys_only(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_timing_keys_only(v) for v in tree]
    return tree


def _arrays(tree: Any) -> list[dict[str, Any]]:
    """Every flattened array in a ``to_plain`` tree, depth first."""
    if isinstance(tree, dict):
        if "ndarray" in tree:
            return [tree]
        return [a for v in tree.values() for a in _arrays(v)]
    if isinstance(tree, list):
        return [a for v in tree for a in _arrays(v)]
    return []


@pytest.mark.parametrize(
    ("name", "operation", "model", "args", "kwargs"), FAMILY_CALLS, ids=[c[0] for c in FAMILY_CALLS]
)
def test_our_sdk_decodes_every_output_as_the_public_sdk(
    public_family_results, our_family_client, name, operation, model, args, kwargs
) -> None:
    public = _timing_keys_only(public_family_results[name])
    raw = getattr(our_family_client, operation)(model, *args, **kwargs)
    ours = _timing_keys_only(json.loads(json.dumps(to_plain(raw))))
    # The answer must carry what was asked for: no empty result can pass as "equal".
    if operation == "encode":
        wanted = set(kwargs.get("output_types", []))
        for result in public if isinstance(public, list) else [public]:
            assert wanted <= set(result), f"{name}: {sorted(result)} lacks {sorted(wanted)}"
            assert any(key in result for key in ("dense", "sparse", "multivector"))
        assert _arrays(public), f"{name}: the public SDK decoded no arrays"
    elif operation == "extract":
        results = public if isinstance(public, list) else [public]
        assert len(results) == len(_as_list(args[0]))
        found = "classifications" if name.startswith("gliclass") else "entities"
        assert any(result[found] for result in results), f"{name}: no {found} came back"
    else:
        assert len(public["scores"]) == len(args[1])
        assert [s["rank"] for s in public["scores"]] == list(range(len(args[1])))
    assert ours == public


SCORE_CALLS = [c for c in FAMILY_CALLS if c[1] == "score"]


@pytest.mark.parametrize(("name", "operation", "model", "args", "kwargs"), SCORE_CALLS[:1], ids=["rerank"])
def test_score_result_carries_request_metadata(
    families, public_family_results, our_family_client, name, operation, model, args, kwargs
) -> None:
    instance = families.client.get("/healthz").headers["x-sie-runtime-instance"]
    ours = our_family_client.score(model, *args, **kwargs)
    usage = ours["usage"]  # the body's, whose values tests/e2e/test_usage.py holds to the tokenizer
    assert public_family_results[name]["request"] == {
        "runtime_instance_id": instance,
        "served_by": "local",
        "usage": {
            "input_tokens": usage["input_tokens"],
            "content_input_tokens": usage["input_tokens_details"]["content_tokens"],
        },
    }
    assert ours.get("request") == public_family_results[name]["request"]


ENCODE_CALLS = [c for c in FAMILY_CALLS if c[1] == "encode"]


@pytest.mark.parametrize(
    ("name", "operation", "model", "args", "kwargs"), ENCODE_CALLS, ids=[c[0] for c in ENCODE_CALLS]
)
def test_public_sdk_decodes_the_json_wire_values(
    families, public_family_results, name, operation, model, args, kwargs
) -> None:
    """What the public SDK decoded from our msgpack is what our JSON answer says, output by output."""
    params: dict[str, Any] = {
        k: kwargs[k] for k in ("output_types", "output_dtype", "instruction") if k in kwargs
    }
    options = {**kwargs.get("options", {}), **({"is_query": True} if kwargs.get("is_query") else {})}
    if options:
        params["options"] = options
    response = families.client.post(
        f"/v1/encode/{model}",
        json={"items": _as_list(args[0]), "params": params},
        headers={"accept": "application/json"},
    )
    assert response.status_code == 200, response.text
    public = _as_list(public_family_results[name])
    wire = response.json()["items"]
    assert len(public) == len(wire)
    for pub, raw in zip(public, wire, strict=True):
        assert pub.get("id") == raw.get("id")
        outputs = [k for k in ("dense", "sparse", "multivector") if k in raw]
        assert outputs and outputs == [k for k in ("dense", "sparse", "multivector") if k in pub]
        for output in outputs:
            pairs = (
                [
                    (pub[output]["indices"], raw[output]["indices"]),
                    (pub[output]["values"], raw[output]["values"]),
                ]
                if output == "sparse"
                else [(pub[output], raw[output]["values"])]
            )
            for decoded, values in pairs:
                expected = np.asarray(values, dtype=decoded["ndarray"])
                assert list(expected.shape) == decoded["shape"]
                np.testing.assert_array_equal(
                    np.asarray(decoded["values"], dtype=decoded["ndarray"]), expected
                )
            dtype = pub[output]["values"]["ndarray"] if output == "sparse" else pub[output]["ndarray"]
            assert raw[output]["dtype"] == dtype


CATALOGUE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from sie_sdk import SIEClient

    url, query, docs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    out = {}
    with SIEClient(url, timeout_s=60) as client:
        models = {m["name"]: m for m in client.list_models()}
        out["m3"] = models["BAAI/bge-m3"]
        out["flag"] = models["BAAI/bge-m3:bge_m3_flag"]
        out["jina"] = models["jinaai/jina-reranker-v2-base-multilingual"]
        result = client.score(
            "jinaai/jina-reranker-v2-base-multilingual", {"text": query}, [{"text": d, "id": str(i)} for i, d in enumerate(docs)]
        )
        out["scores"] = {entry["item_id"]: entry["score"] for entry in result["scores"]}
    print(json.dumps(out))
    """
)


def test_public_sdk_gets_the_two_ids_the_public_suites_call(families, family_folders, run_public_sdk) -> None:
    """The two ids the public suites call and we lacked: the FlagEmbedding profile of bge-m3, and
    Jina's reranker (the shipped YAML on built weights in Jina's Hub-code layout), whose scores equal
    sentence-transformers' ``CrossEncoder`` on the same weights saved by transformers."""
    out = run_public_sdk(CATALOGUE_SCRIPT, families.url, FAMILY_QUERY, json.dumps(FAMILY_DOCS))
    assert out["m3"]["revision"] is None or isinstance(out["m3"]["revision"], str)
    assert (
        out["m3"]["routing"] == {"policy": None, "upstream_kind": None} and out["m3"]["capabilities"] is None
    )
    assert out["flag"]["state"] == "available" and out["flag"]["profiles"]["default"]["is_default"] is True
    assert out["jina"]["state"] == "loaded" and out["jina"]["last_error"] is None
    reference = CrossEncoder(str(family_folders["jina_reference"]), device="cpu").predict(
        [(FAMILY_QUERY, doc) for doc in FAMILY_DOCS]
    )
    scores = [out["scores"][str(index)] for index in range(len(FAMILY_DOCS))]
    np.testing.assert_allclose(scores, reference, atol=1e-5)
