"""The cluster end to end: the public ``sie-sdk`` 0.10.1 → ``sie-gateway`` → a real ``nats-server``
(JetStream) → two ``sie-server`` queue workers (the session's ``queue_cluster``), against the
standalone server on the same models.

Every call of the public-SDK family comparison (dense, sparse, multivector, MUVERA, BGE-M3, score by
cross-encoder and by similarity, GLiNER extract) is made through the gateway and through the
``families`` standalone server and must decode to the same results. Bad input is refused by the
gateway with the standalone server's status and body, before anything is published. A 2 MiB item
travels through the payload store and the store is empty afterwards.
"""

from __future__ import annotations

import json
from typing import Any

import msgpack
import numpy as np
import pytest

from tests.conftest import random_png
from tests.e2e.cluster import Gateway
from tests.e2e.conftest import (
    CLUSTER_PRELOAD,
    DECIDE,
    GLIFORMER,
    GLINER,
    MINILM,
    QWEN3_VL_RERANKER,
    RERANKER,
    QueueCluster,
    Server,
    unpack_body,
)
from tests.e2e.test_public_sdk import FAMILY_CALLS, FAMILY_SCRIPT

BIG_TEXT_BYTES = 2 * 1024 * 1024  # a 2 MiB item: over NATS's 1 MiB messages, at the text limit


def _comparable(tree: Any) -> Any:
    """A decoded result without what differs by design between a server and a gateway: timings
    (numbers) and the request metadata (which process answered)."""
    if isinstance(tree, dict):
        return {k: sorted(v) if k == "timing" else _comparable(v) for k, v in tree.items() if k != "request"}
    if isinstance(tree, list):
        return [_comparable(v) for v in tree]
    return tree


def _assert_same(ours: Any, theirs: Any, where: str = "") -> None:
    """Equal trees; arrays of equal dtype and shape with values within float32 batching noise (a
    worker may batch an item with other items than the server did; integer outputs within 1)."""
    assert type(ours) is type(theirs), where
    if isinstance(ours, dict) and "ndarray" in ours:
        assert (ours["ndarray"], ours["shape"]) == (theirs["ndarray"], theirs["shape"]), where
        a = np.asarray(ours["values"], dtype=np.float64)
        b = np.asarray(theirs["values"], dtype=np.float64)
        tolerance = 1.0 if ours["ndarray"] in ("int8", "uint8") else 1e-5
        np.testing.assert_allclose(a, b, atol=tolerance, rtol=1e-4, err_msg=where)
    elif isinstance(ours, dict):
        assert sorted(ours) == sorted(theirs), where
        for key in ours:
            _assert_same(ours[key], theirs[key], f"{where}.{key}")
    elif isinstance(ours, list):
        assert len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            _assert_same(a, b, f"{where}[{i}]")
    elif isinstance(ours, float):
        assert ours == pytest.approx(theirs, abs=1e-5), where
    else:
        assert ours == theirs, where


def test_the_public_sdk_gets_the_standalone_servers_results_through_the_cluster(
    gateway: Gateway, families: Server, run_public_sdk
) -> None:
    calls = json.dumps(FAMILY_CALLS)
    through_cluster = run_public_sdk(FAMILY_SCRIPT, gateway.url, calls)
    standalone = run_public_sdk(FAMILY_SCRIPT, families.url, calls)
    operations = {operation for _, operation, *_ in FAMILY_CALLS}
    assert operations == {"encode", "score", "extract"}
    for name, *_ in FAMILY_CALLS:
        _assert_same(_comparable(through_cluster[name]), _comparable(standalone[name]), name)
    published = gateway.metric("sie_gateway_queue_items_published_total")
    assert published >= sum(
        len(args[0]) if op != "score" and isinstance(args[0], list) else 1
        for _, op, _, args, _ in FAMILY_CALLS
    )
    assert {w["name"] for w in gateway.health()["workers"]} == {"w1", "w2"}


BAD_REQUESTS: list[tuple[str, str, Any]] = [
    ("empty items", f"/v1/encode/{MINILM}", {"items": []}),
    ("no items", f"/v1/encode/{MINILM}", {"params": {}}),
    ("unknown model", "/v1/encode/nobody/nothing", {"items": [{"text": "x"}]}),
    (
        "unknown output type",
        f"/v1/encode/{MINILM}",
        {"items": [{"text": "x"}], "params": {"output_types": ["nope"]}},
    ),
    (
        "output the model lacks",
        f"/v1/encode/{MINILM}",
        {"items": [{"text": "x"}], "params": {"output_types": ["sparse"]}},
    ),
    (
        "unknown option",
        f"/v1/encode/{MINILM}",
        {"items": [{"text": "x"}], "params": {"options": {"nope": 1}}},
    ),
    (
        "unknown profile",
        f"/v1/encode/{MINILM}",
        {"items": [{"text": "x"}], "params": {"options": {"profile": "nope"}}},
    ),
    ("text not a string", f"/v1/encode/{MINILM}", {"items": [{"text": 5}]}),
    ("score without query", f"/v1/score/{RERANKER}", {"items": [{"text": "x"}]}),
    (
        "score on an embedder without a mode",
        f"/v1/score/{GLINER}",
        {"query": {"text": "q"}, "items": [{"text": "x"}]},
    ),
    ("extract on an embedder", f"/v1/extract/{MINILM}", {"items": [{"text": "x"}]}),
    (
        "extract with a schema",
        f"/v1/extract/{GLINER}",
        {"items": [{"text": "x"}], "params": {"output_schema": {}}},
    ),
    ("text over the limit", f"/v1/encode/{MINILM}", {"items": [{"text": "x" * (BIG_TEXT_BYTES + 1)}]}),
    (
        "a family this release does not run",
        "/v1/extract/openai/whisper-large-v3-turbo",
        {"items": [{"text": "x"}]},
    ),
    ("a Candle profile", "/v1/encode/BAAI/bge-m3:candle", {"items": [{"text": "x"}]}),
]


@pytest.mark.parametrize(("name", "path", "body"), BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_bad_input_gets_the_standalone_servers_answer_and_publishes_nothing(
    gateway: Gateway, families: Server, name: str, path: str, body: Any
) -> None:
    published = gateway.metric("sie_gateway_queue_items_published_total")
    for content_type, data in (
        ("application/json", json.dumps(body).encode()),
        ("application/msgpack", msgpack.packb(body)),
    ):
        headers = {"content-type": content_type}
        ours = gateway.client.post(path, content=data, headers=headers)
        theirs = families.client.post(path, content=data, headers=headers)
        assert 400 <= theirs.status_code < 500, theirs.text
        assert (ours.status_code, ours.json()) == (theirs.status_code, theirs.json()), name
    assert gateway.metric("sie_gateway_queue_items_published_total") == published


def test_a_2_mib_item_travels_through_the_payload_store(
    queue_cluster: QueueCluster, families: Server
) -> None:
    gateway = queue_cluster.gateway
    text = ("storage pressure " * (BIG_TEXT_BYTES // 17 + 1))[:BIG_TEXT_BYTES]
    assert len(text.encode()) == BIG_TEXT_BYTES
    body = msgpack.packb({"items": [{"text": text, "id": "big"}, {"text": "small"}]})
    headers = {"content-type": "application/msgpack"}
    offloads = gateway.metric("sie_gateway_queue_payload_offloads_total")
    ours = gateway.client.post(f"/v1/encode/{MINILM}", content=body, headers=headers)
    theirs = families.client.post(f"/v1/encode/{MINILM}", content=body, headers=headers)
    assert ours.status_code == theirs.status_code == 200, ours.text
    assert gateway.metric("sie_gateway_queue_payload_offloads_total") == offloads + 1
    got, want = unpack_body(ours.content)["items"], unpack_body(theirs.content)["items"]
    assert [i.get("id") for i in got] == ["big", None]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a["dense"]["values"], b["dense"]["values"], atol=1e-5)
    store = queue_cluster.payloads  # the cluster's SIE_PAYLOAD_STORE_URL
    assert store.is_dir() and list(store.iterdir()) == []  # the gateway deleted what it wrote


def test_typed_decisions_travel_with_their_output_schema_and_state_items(
    gateway: Gateway, families: Server
) -> None:
    """GLiNER2.5-Decide's typed questions (``params.output_schema``) and an item carrying only a Laya
    state reach the worker through the queue and answer as the standalone server does."""
    questions = {
        "intent": {"type": "choice", "instructions": "What is asked?", "criteria": ["refund", "info"]},
        "human": {"type": "noul", "instructions": "Needs a person?"},
    }
    body = {
        "items": [{"text": "where is my parcel"}, {"metadata": {"state": {"order": 7, "status": "lost"}}}],
        "params": {"output_schema": questions},
    }
    headers = {"accept": "application/json"}
    ours = gateway.client.post(f"/v1/extract/{DECIDE}", json=body, headers=headers)
    theirs = families.client.post(f"/v1/extract/{DECIDE}", json=body, headers=headers)
    assert ours.status_code == theirs.status_code == 200, ours.text
    got, want = ours.json()["items"], theirs.json()["items"]
    assert [list(item["data"]) for item in got] == [list(questions)] * 2
    _assert_same(_comparable(got), _comparable(want))


def test_a_model_that_embeds_and_extracts_answers_both_and_a_json_schema_through_the_queue(
    gateway: Gateway, families: Server
) -> None:
    """GLiFormer embeds and extracts: its vectors, its joint entities and relations, and a JSON
    Schema ``output_schema`` answered in ``data`` come back through the queue as from the standalone
    server."""
    texts = [
        {"text": "Ada Lovelace worked with Charles Babbage in London."},
        {"text": "Alice lives in Berlin."},
    ]
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "topic": {"enum": ["science", "travel"]}},
    }
    for route, params in (
        ("encode", {}),
        (
            "extract",
            {"labels": ["person", "city"], "options": {"threshold": 0.25, "relation_labels": ["lives in"]}},
        ),
        ("extract", {"output_schema": schema, "options": {"threshold": 0.2}}),
    ):
        body = {"items": texts, "params": params}
        headers = {"accept": "application/json"}
        ours = gateway.client.post(f"/v1/{route}/{GLIFORMER}", json=body, headers=headers)
        theirs = families.client.post(f"/v1/{route}/{GLIFORMER}", json=body, headers=headers)
        assert ours.status_code == theirs.status_code == 200, ours.text
        items = ours.json()["items"]
        assert any(item.get("dense") or item["entities"] or item["data"] for item in items), items
        _assert_same(_comparable(items), _comparable(theirs.json()["items"]))


def test_image_documents_reach_a_reranker_that_reads_images_through_the_queue(
    gateway: Gateway, families: Server
) -> None:
    """Qwen3-VL-Reranker scoring a text query against a text, an image and a captioned image: the
    images and the caption beside one travel in the work items and score as on the standalone server."""
    image = {"data": random_png(64, 48, 5), "format": "png"}
    body = {
        "query": {"text": "a red bicycle"},
        "items": [
            {"id": "text", "text": "a blue car"},
            {"id": "image", "images": [image]},
            {"id": "captioned", "text": "a caption", "images": [image]},
        ],
    }
    headers = {"content-type": "application/msgpack", "accept": "application/msgpack"}
    ours = gateway.client.post(f"/v1/score/{QWEN3_VL_RERANKER}", content=msgpack.packb(body), headers=headers)
    theirs = families.client.post(
        f"/v1/score/{QWEN3_VL_RERANKER}", content=msgpack.packb(body), headers=headers
    )
    assert ours.status_code == theirs.status_code == 200, ours.text
    got, want = unpack_body(ours.content)["scores"], unpack_body(theirs.content)["scores"]
    assert {s["item_id"] for s in got} == {"text", "image", "captioned"}
    by_id = {s["item_id"]: s["score"] for s in want}
    for entry in got:
        assert abs(entry["score"] - by_id[entry["item_id"]]) <= 1e-5, (got, want)
    # The caption is read beside its image: the two image documents score apart.
    assert abs(by_id["image"] - by_id["captioned"]) > 1e-4


def test_models_and_health_come_from_the_workers_heartbeats(gateway: Gateway, families: Server) -> None:
    ours = {m["name"]: m for m in gateway.client.get("/v1/models").json()["models"]}
    theirs = {m["name"]: m for m in families.client.get("/v1/models").json()["models"]}
    assert sorted(ours) == sorted(theirs)

    def listed(entry: dict[str, Any]) -> dict[str, Any]:
        """An entry without its state and the process that rendered it (each names itself)."""
        profiles = {
            name: {k: v for k, v in info.items() if k != "runtime_instance_id"}
            for name, info in entry["profiles"].items()
        }
        kept = {k: v for k, v in entry.items() if k not in ("loaded", "state", "last_error")}
        return {**kept, "profiles": profiles}

    for name in CLUSTER_PRELOAD:
        assert (ours[name]["loaded"], ours[name]["state"]) == (True, "loaded"), name
        assert listed(ours[name]) == listed(theirs[name])
    assert gateway.client.get("/v1/models/nobody/nothing").status_code == 404
    health = gateway.health()
    assert (health["type"], health["status"], health["cluster"]["worker_count"]) == ("gateway", "healthy", 2)
    assert gateway.metric("sie_gateway_workers", status="healthy") == 2
    assert gateway.metric("sie_gateway_model_workers", model=MINILM) == 2
