"""The shipped catalogue through a real server with an empty weight cache and no hub.

``GET /v1/models`` must list every id of the public catalogue with the public entry's fields (outputs,
dims, profiles, revision, capabilities, routing), without loading anything; an id of a family this
release does not run is listed as failed and refused with 400 ``MODEL_NOT_SERVED`` naming the family. A model whose weights are
nowhere must fail its load cleanly: ``502 MODEL_LOAD_FAILED`` naming every place searched, so the
operator knows what to fix, while the server goes on serving the models it has. The packaged tiny
SPLADE must load from its Python package alone.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgpack
import pytest

from sie.catalog.catalog import Catalog
from tests.conftest import MODELS_DIR
from tests.e2e.conftest import MSGPACK_HEADERS, READY_TIMEOUT_S, Server

CATALOG = Catalog.from_directory(MODELS_DIR)


def expected_info(name: str, runtime_instance_id: str) -> dict[str, Any]:
    """The public server's entry for ``name``: outputs in its fixed order, a variant's profile listed
    as its only (default) one, ``revision`` from the YAML, ``routing`` always present."""
    entry = CATALOG.get(name)
    assert entry is not None
    config = entry.config
    declared = {c.value for c in config.output_types()}
    outputs = [o for o in ("dense", "sparse", "multivector") if o in declared]
    outputs += ["score"] if config.tasks.score is not None else []
    outputs += ["json"] if config.tasks.extract is not None else []  # the public name of extraction
    outputs += ["tokens"] if config.tasks.generate is not None else []
    profile = {
        "identity": None,
        "remote_contract_sha256": None,
        "remote_execution_sha256": None,
        "runtime_instance_id": runtime_instance_id,
    }
    variant = name != config.sie_id
    length = entry.profile.loadtime.get("max_seq_length") if variant else None
    return {
        "inputs": config.inputs.names(),
        "outputs": outputs,
        "dims": config.tasks.encode.dims() if config.tasks.encode else {},
        "max_sequence_length": length if isinstance(length, int) else config.max_sequence_length,
        "profiles": {"default": {"is_default": True, **profile}}
        if variant
        else {p: {"is_default": p == entry.profile.name, **profile} for p in config.profiles},
        "revision": config.hf_revision,
        "routing": {"policy": None, "upstream_kind": None},
    }


def test_models_lists_the_catalogue(empty_cache_server: Server) -> None:
    response = empty_cache_server.client.get("/v1/models")
    assert response.status_code == 200
    models = {m["name"]: m for m in response.json()["models"]}
    assert list(models) == CATALOG.names()
    instance = models["BAAI/bge-m3"]["profiles"]["default"]["runtime_instance_id"]
    assert instance == response.headers["x-sie-runtime-instance"]  # the process, as its headers name it
    for name, info in models.items():
        expected = expected_info(name, instance)
        assert {key: info[key] for key in expected} == expected, name
    # Spot checks against the public server's facts.
    m3 = models["BAAI/bge-m3"]
    assert m3["outputs"] == ["dense", "sparse", "multivector", "score"]
    assert m3["dims"] == {"dense": 1024, "sparse": 250002, "multivector": 1024}
    assert "bge_m3_flag" in m3["profiles"] and models["BAAI/bge-m3:bge_m3_flag"]["state"] == "available"
    assert m3["capabilities"] is None and m3["state"] == "available" and m3["last_error"] is None
    assert models["BAAI/bge-m3:sparse"]["profiles"]["default"]["is_default"] is True
    colbert = models["colbert-ir/colbertv2.0:muvera"]
    assert colbert["dims"] == {"multivector": 128} and colbert["outputs"] == ["multivector", "score"]
    reranker = models["cross-encoder/ms-marco-MiniLM-L-6-v2"]
    assert reranker["outputs"] == ["score"] and reranker["dims"] == {}
    assert models["rasyosef/splade-tiny"]["dims"] == {"sparse": 30522}
    gliner = models["urchade/gliner_multi-v2.1"]
    assert gliner["outputs"] == ["json"] and gliner["dims"] == {} and gliner["max_sequence_length"] == 384
    clip = models["openai/clip-vit-base-patch32"]
    assert clip["inputs"] == ["text", "image"] and clip["dims"] == {"dense": 512}
    assert models["jinaai/jina-reranker-v2-base-multilingual"]["revision"] == (
        "9cfeff2df7d40d1b78e75e5e9cebec92a99813c9"
    )
    qwen = models["Qwen/Qwen3-4B-Instruct-2507"]
    assert qwen["outputs"] == ["tokens"] and qwen["capabilities"]["streaming"] is True
    # A variant takes its profile's ``loadtime.max_seq_length``, as the public server's does.
    assert models["Qwen/Qwen3-0.6B:long-context"]["max_sequence_length"] == 32768


# Ids of families this release does not run, one per kind, and the family each refusal names.
NOT_SERVED = [
    ("google/madlad400-3b-mt", "encode", "a generative translation model (CTranslate2)"),
    ("openai/whisper-large-v3-turbo", "extract", "a speech recognition model (Whisper)"),
    ("zai-org/GLM-OCR:transformers", "extract", "an OCR vision-language model (GLM-OCR)"),
    ("openai/privacy-filter", "extract", "a PII filter (privacy-filter)"),
    ("TomoroAI/tomoro-colqwen3-embed-4b", "encode", "a visual document retriever (ColQwen3)"),
    ("nvidia/NV-Embed-v2", "encode", "a model whose architecture is code on the Hugging Face Hub"),
    ("topk-io/Iso-ModernColBERT:smve", "encode", "a sparse multi-vector encoding (SMVE) of a ColBERT"),
    ("BAAI/bge-base-en-v1.5:candle", "encode", "the Candle (Rust) runtime"),
]


@pytest.mark.parametrize(("model", "route", "family"), NOT_SERVED, ids=[n[0] for n in NOT_SERVED])
def test_a_family_this_release_does_not_run_is_listed_failed_and_refused_by_name(
    empty_cache_server: Server, model: str, route: str, family: str
) -> None:
    listed = empty_cache_server.client.get(f"/v1/models/{model}").json()
    assert listed["state"] == "failed" and listed["loaded"] is False
    error = listed["last_error"]
    assert error["code"] == "MODEL_NOT_SERVED" and error["permanent"] is True
    assert family in error["message"] and "not serve" in error["message"]
    body = {"items": [{"text": "hello"}], "params": {"labels": ["person"]}}
    response = post(empty_cache_server, route, model, body)
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert detail == {"code": "MODEL_NOT_SERVED", "message": error["message"]}
    assert f"Model '{model}' is {family}" in detail["message"]
    assert post(empty_cache_server, "encode", "nope/missing", body).status_code == 404
    assert empty_cache_server.client.get("/healthz").status_code == 200


# (model id, route, body): one of each family, and a profile variant.
ABSENT = [
    ("intfloat/e5-small-v2", "encode", {"items": [{"text": "hello"}]}),
    ("naver/splade-v3", "encode", {"items": [{"text": "hello"}], "params": {"output_types": ["sparse"]}}),
    ("colbert-ir/colbertv2.0:muvera", "encode", {"items": [{"text": "hello"}]}),
    ("BAAI/bge-m3:sparse", "encode", {"items": [{"text": "hello"}]}),
    ("cross-encoder/ms-marco-MiniLM-L-6-v2", "score", {"query": {"text": "q"}, "items": [{"text": "d"}]}),
    (
        "urchade/gliner_small-v2.1",
        "extract",
        {"items": [{"text": "hello"}], "params": {"labels": ["person"]}},
    ),
    (
        "MoritzLaurer/deberta-v3-base-zeroshot-v2.0",
        "extract",
        {"items": [{"text": "hello"}], "params": {"labels": ["greeting"]}},
    ),
    ("openai/clip-vit-base-patch32", "encode", {"items": [{"text": "hello"}]}),
    (
        "google/siglip-so400m-patch14-384",
        "encode",
        {"items": [{"images": [{"data": b"\x89PNG", "format": "png"}]}]},
    ),
    # The context pruner's reranker (hf_id BAAI/bge-reranker-v2-m3) is looked for before its head.
    (
        "sugiv/stablebridge-pruner-highlighter",
        "extract",
        {"items": [{"text": "hello"}], "params": {"instruction": "greeting"}},
    ),
]


def post(server: Server, route: str, model: str, body: dict[str, Any]) -> Any:
    return server.client.post(f"/v1/{route}/{model}", content=msgpack.packb(body), headers=MSGPACK_HEADERS)


@pytest.mark.parametrize(("model", "route", "body"), ABSENT, ids=[a[0] for a in ABSENT])
def test_absent_weights_fail_naming_every_place_searched(
    empty_cache_server: Server, empty_cache: Path, model: str, route: str, body: dict[str, Any]
) -> None:
    server = empty_cache_server
    deadline = time.monotonic() + READY_TIMEOUT_S
    response = post(server, route, model, body)
    while response.status_code == 503 and time.monotonic() < deadline:
        assert response.json()["detail"]["code"] == "MODEL_LOADING"
        time.sleep(0.1)
        response = post(server, route, model, body)
    assert response.status_code == 502, response.text
    assert "retry-after" not in response.headers
    detail = response.json()["detail"]
    assert detail["code"] == "MODEL_LOAD_FAILED"
    assert detail["permanent"] is True
    entry = CATALOG.get(model)
    assert entry is not None
    hf_id = entry.config.hf_id
    message = detail["message"]
    assert message.startswith(f"Model '{model}' failed to load (NOT_FOUND): its weights are in none")
    assert str(empty_cache) not in message  # the places searched are the log's (audit L2)
    log = server.log()
    assert f"no weights for '{hf_id}'" in log
    snapshots = empty_cache / f"models--{hf_id.replace('/', '--')}" / "snapshots"
    assert f"local cache {snapshots} (no snapshot)" in log
    assert "packages (none ships this model)" in log
    assert f"hub download of '{hf_id}' (offline: HF_HUB_OFFLINE is set)" in log

    # Permanent: the next request is answered from the recorded failure, without a new load.
    again = post(server, route, model, body)
    assert again.status_code == 502 and again.json()["detail"]["message"] == message
    info = server.client.get(f"/v1/models/{model}").json()
    assert info["state"] == "failed" and info["loaded"] is False
    assert info["last_error"]["code"] == "MODEL_LOAD_FAILED" and info["last_error"]["message"] in message

    # ... and the server keeps serving what it has.
    assert server.client.get("/healthz").status_code == 200
    server.assert_serving()


def test_packaged_splade_loads_offline(empty_cache_server: Server, unpack: Any) -> None:
    body = {"items": [{"text": "what causes high blood pressure"}], "params": {"output_types": ["sparse"]}}
    deadline = time.monotonic() + READY_TIMEOUT_S
    response = post(empty_cache_server, "encode", "rasyosef/splade-tiny", body)
    while response.status_code == 503 and time.monotonic() < deadline:
        time.sleep(0.1)
        response = post(empty_cache_server, "encode", "rasyosef/splade-tiny", body)
    assert response.status_code == 200, response.text
    sparse = unpack(response.content)["items"][0]["sparse"]
    assert sparse["dims"] == 30522 and len(sparse["indices"]) > 5
    info = empty_cache_server.client.get("/v1/models/rasyosef/splade-tiny").json()
    assert info["state"] == "loaded"
