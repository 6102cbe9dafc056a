"""The shipped catalogue through a real server with an empty weight cache and no hub.

``GET /v1/models`` must list every id the public server lists for the families this release runs,
with the outputs, dims and profiles of its YAML, without loading anything. A model whose weights are
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

from sie.engine.catalog import Catalog
from tests.conftest import MODELS_DIR
from tests.e2e.conftest import MSGPACK_HEADERS, Server

CATALOG = Catalog.from_directory(MODELS_DIR)
LOAD_TIMEOUT_S = 60.0


def expected_info(name: str) -> dict[str, Any]:
    entry = CATALOG.get(name)
    assert entry is not None
    config = entry.config
    outputs = sorted(c.value for c in config.output_types()) + (
        ["score"] if config.tasks.score is not None else []
    )
    outputs += ["json"] if config.tasks.extract is not None else []  # the public name of extraction
    return {
        "inputs": config.inputs.names(),
        "outputs": outputs,
        "dims": config.tasks.encode.dims() if config.tasks.encode else {},
        "max_sequence_length": config.max_sequence_length,
        "profiles": {p: {"is_default": p == entry.profile.name} for p in config.profiles},
    }


def test_models_lists_the_catalogue(empty_cache_server: Server) -> None:
    response = empty_cache_server.client.get("/v1/models")
    assert response.status_code == 200
    models = {m["name"]: m for m in response.json()["models"]}
    assert list(models) == CATALOG.names()
    for name, info in models.items():
        assert {key: info[key] for key in expected_info(name)} == expected_info(name), name
    # Spot checks against the public server's facts.
    m3 = models["BAAI/bge-m3"]
    assert m3["outputs"] == ["dense", "multivector", "sparse", "score"]
    assert m3["dims"] == {"dense": 1024, "sparse": 250002, "multivector": 1024}
    assert set(m3["profiles"]) == {"default", "dense", "sparse", "multivector", "banking", "medical-vn"}
    assert models["BAAI/bge-m3:sparse"]["profiles"]["sparse"] == {"is_default": True}
    colbert = models["colbert-ir/colbertv2.0:muvera"]
    assert colbert["dims"] == {"multivector": 128} and colbert["outputs"] == ["multivector"]
    reranker = models["cross-encoder/ms-marco-MiniLM-L-6-v2"]
    assert reranker["outputs"] == ["score"] and reranker["dims"] == {}
    assert models["rasyosef/splade-tiny"]["dims"] == {"sparse": 30522}
    gliner = models["urchade/gliner_multi-v2.1"]
    assert gliner["outputs"] == ["json"] and gliner["dims"] == {} and gliner["max_sequence_length"] == 384
    clip = models["openai/clip-vit-base-patch32"]
    assert clip["inputs"] == ["text", "image"] and clip["dims"] == {"dense": 512}


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
]


def post(server: Server, route: str, model: str, body: dict[str, Any]) -> Any:
    return server.client.post(f"/v1/{route}/{model}", content=msgpack.packb(body), headers=MSGPACK_HEADERS)


@pytest.mark.parametrize(("model", "route", "body"), ABSENT, ids=[a[0] for a in ABSENT])
def test_absent_weights_fail_naming_every_place_searched(
    empty_cache_server: Server, empty_cache: Path, model: str, route: str, body: dict[str, Any]
) -> None:
    server = empty_cache_server
    deadline = time.monotonic() + LOAD_TIMEOUT_S
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
    hf_id = model.partition(":")[0]
    message = detail["message"]
    assert message.startswith(f"Model '{model}' failed to load: WeightsNotFound: no weights for '{hf_id}'")
    snapshots = empty_cache / f"models--{hf_id.replace('/', '--')}" / "snapshots"
    assert f"local cache {snapshots} (no snapshot)" in message
    assert "packages (none ships this model)" in message
    assert f"hub download of '{hf_id}' (offline: HF_HUB_OFFLINE is set)" in message

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
    deadline = time.monotonic() + LOAD_TIMEOUT_S
    response = post(empty_cache_server, "encode", "rasyosef/splade-tiny", body)
    while response.status_code == 503 and time.monotonic() < deadline:
        time.sleep(0.1)
        response = post(empty_cache_server, "encode", "rasyosef/splade-tiny", body)
    assert response.status_code == 200, response.text
    sparse = unpack(response.content)["items"][0]["sparse"]
    assert sparse["dims"] == 30522 and len(sparse["indices"]) > 5
    info = empty_cache_server.client.get("/v1/models/rasyosef/splade-tiny").json()
    assert info["state"] == "loaded"
