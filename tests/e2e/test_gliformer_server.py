"""GLiFormer under its public id (``knowledgator/gliformer-base-v1``, the shipped YAML) through a real
server: ``/v1/encode`` and every extract request shape, JSON and msgpack alike, each answer equal to
the adapter run in this process on the same built weights (which tests/adapters holds to the
``gliformer`` library); bad requests are the client's 400 and the server keeps serving."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from sie.adapters.batch import AnnotatedText
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.gliformer import GliformerModel
from sie.core.extraction import Extraction
from sie.core.options import Capability, ComputePrecision
from sie.core.task import Task
from tests import builders
from tests.e2e.conftest import GLIFORMER, MSGPACK_HEADERS, Server, answered_alike

TEXTS = list(builders.GLIFORMER_SENTENCES[:3])
KEYS = {"id", "entities", "relations", "classifications", "objects", "data"}
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "people": {"type": "array", "items": {"type": "object", "properties": {"who": {"type": "string"}}}},
        "topic": {"enum": ["science", "business"]},
    },
}


@pytest.fixture(scope="module")
def local(family_folders: dict[str, Path]) -> GliformerModel:
    """The adapter on the server's weights, its window the shipped YAML's."""
    return GliformerModel.load(LoadSpec(family_folders["gliformer"], "cpu", ComputePrecision.FLOAT32, 2048))


def local_extract(
    local: GliformerModel, task: Task, metadata: list[dict[str, Any]] | None = None
) -> list[Extraction]:
    asked = Forward(frozenset({Capability.EXTRACT}), task=task)
    items = [
        AnnotatedText(text, meta) for text, meta in zip(TEXTS, metadata or [{}] * len(TEXTS), strict=True)
    ]
    return local.run(local.prepare(items, asked), asked).extractions or []


def same(items: list[dict[str, Any]], expected: list[Extraction]) -> None:
    for item, want in zip(items, expected, strict=True):
        assert set(item) == KEYS and item["objects"] == []
        assert [(e["text"], e["label"], e["start"], e["end"]) for e in item["entities"]] == [
            (e.text, e.label, e.start, e.end) for e in want.entities
        ]
        np.testing.assert_allclose(
            [e["score"] for e in item["entities"]], [e.score for e in want.entities], atol=1e-5
        )
        assert [(r["head"], r["tail"], r["relation"]) for r in item["relations"]] == [
            (r.head, r.tail, r.relation) for r in want.relations
        ]
        assert [c["label"] for c in item["classifications"]] == [c.label for c in want.classifications]
        assert item["data"] == want.data


def test_encode_is_the_embedding_heads_vector_normalised(
    families: Server, local: GliformerModel, unpack: Any
) -> None:
    body = {"items": [{"text": text} for text in TEXTS]}
    as_json = families.client.post(
        f"/v1/encode/{GLIFORMER}", json=body, headers={"accept": "application/json"}
    )
    packed = families.client.post(
        f"/v1/encode/{GLIFORMER}", content=msgpack.packb(body), headers=MSGPACK_HEADERS
    )
    assert as_json.status_code == packed.status_code == 200, as_json.text
    vectors = np.array([item["dense"]["values"] for item in as_json.json()["items"]], dtype=np.float32)
    np.testing.assert_allclose(
        [item["dense"]["values"] for item in unpack(packed.content)["items"]], vectors, atol=1e-7
    )
    dense = Forward(frozenset({Capability.DENSE}))
    raw = local.run(local.prepare(TEXTS, dense), dense).dense
    assert raw is not None
    expected = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    np.testing.assert_allclose(vectors, expected, atol=1e-5)
    listed = families.client.get(f"/v1/models/{GLIFORMER}").json()
    assert set(listed["outputs"]) >= {"dense", "json"}


@pytest.mark.parametrize(
    "params",
    [
        {"labels": ["person", "city", "organization"], "options": {"threshold": 0.25}},
        {
            "labels": ["person", "city"],
            "options": {"threshold": 0.25, "relation_labels": ["lives in", "works at"]},
        },
        {"labels": ["science", "business"], "options": {"classification_task": "topic", "threshold": 0.0}},
        {"options": {"label_groups": {"topic": ["science", "business"], "tone": ["formal", "casual"]}}},
        {"output_schema": SCHEMA, "options": {"threshold": 0.2}},
    ],
    ids=["entities", "relations", "classification_task", "label_groups", "output_schema"],
)
def test_every_request_shape_answers_as_the_adapter(
    families: Server, local: GliformerModel, params: dict[str, Any]
) -> None:
    body = {"items": [{"text": text} for text in TEXTS], "params": params}
    items = answered_alike(families, "extract", GLIFORMER, body)["items"]
    expected = local_extract(
        local, Task.of(params.get("labels", []), params.get("options", {}), None, params.get("output_schema"))
    )
    same(items, expected)
    assert any(
        item["entities"] or item["relations"] or item["classifications"] or item["data"] for item in items
    )


def test_relations_between_the_entities_items_name(families: Server, local: GliformerModel) -> None:
    metadata = []
    for text in TEXTS:
        words = text.split()
        first, last = words[0], words[-1].rstrip(".")
        end = text.rindex(last)
        metadata.append(
            {
                "entities": [
                    {"text": first, "label": "person", "start": 0, "end": len(first)},
                    {"text": last, "label": "place", "start": end, "end": end + len(last)},
                ]
            }
        )
    body = {
        "items": [{"text": t, "metadata": m} for t, m in zip(TEXTS, metadata, strict=True)],
        "params": {"labels": ["lives in"], "options": {"threshold": 0.1}},
    }
    items = answered_alike(families, "extract", GLIFORMER, body)["items"]
    same(items, local_extract(local, Task.of(["lives in"], {"threshold": 0.1}), metadata))
    assert [[e["text"] for e in item["entities"]] for item in items] == [
        [e["text"] for e in m["entities"]] for m in metadata
    ]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"items": [{"text": "x"}], "params": {}}, "requires labels, label_groups, or output_schema"),
        (
            {"items": [{"text": "x"}], "params": {"labels": ["a"], "options": {"threshold": 0.01}}},
            "at least 0.1",
        ),
        (
            {"items": [{"text": "x"}], "params": {"labels": ["a"], "options": {"relations": ["r"]}}},
            "relation_labels",
        ),
        (
            {
                "items": [{"text": "x"}],
                "params": {"output_schema": {"type": "object", "properties": {"n": {"type": "number"}}}},
            },
            "supports string",
        ),
        ({"items": [{"text": "   "}], "params": {"labels": ["a"]}}, "non-blank text"),
        ({"items": [{"text": "x"}], "params": {"labels": ["a"], "options": {"colour": 1}}}, "colour"),
    ],
)
def test_bad_requests_are_the_clients_400(families: Server, body: dict[str, Any], message: str) -> None:
    response = families.client.post(f"/v1/extract/{GLIFORMER}", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["detail"]["code"] == "INVALID_INPUT" and message in response.text
    families.assert_serving()
