"""GLiFormer against the ``gliformer`` library's own calls on the same weights.

No GLiFormer ships on PyPI, so the tests build one (tests/builders.py: a tiny DeBERTa-v2 with every
text head of the knowledgator checkpoints). Its answers are meaningless; that ours are the library's
(embeddings, entities, relations, classes, schema fields), that an item answers the same alone and
in a batch of other lengths, and that every request the public server refuses is refused before any
work, is the point. The reference is the library answering one text at a time (no padding at all).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gliformer import GLiFormer
from gliformer.processing.schema import build_structuring_output_formatter

from sie.adapters import gliformer as gliformer_adapter
from sie.adapters.batch import AnnotatedText
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.gliformer import MAX_RELATION_ENTITIES, GliformerModel
from sie.adapters.gliformer.schema import compile_schema, shape
from sie.core.extraction import Extraction
from sie.core.options import Capability, ComputePrecision
from sie.core.task import Task, UnsupportedInput
from tests import builders

TEXTS = [*builders.GLIFORMER_SENTENCES[:4], "Ada lived in London."]  # five lengths: batches pad
ENTITY_TYPES = ["person", "city", "organization"]
RELATION_TYPES = ["lives in", "works at"]
THRESHOLD = 0.25  # the built heads find a few entities and dozens of relations at it (none at 0.3)
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "people": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"who": {"type": "string"}, "where": {"type": "string"}},
            },
        },
        "topic": {"enum": ["science", "business"]},
    },
}
DENSE = Forward(frozenset({Capability.DENSE}))


def forward(labels: list[str], options: dict[str, Any], schema: dict[str, Any] | None = None) -> Forward:
    return Forward(frozenset({Capability.EXTRACT}), task=Task.of(labels, options, output_schema=schema))


def extract(
    adapter: GliformerModel, texts: list[str], asked: Forward, metadata: list[dict[str, Any]] | None = None
) -> list[Extraction]:
    items = [
        AnnotatedText(text, meta) for text, meta in zip(texts, metadata or [{}] * len(texts), strict=True)
    ]
    found = adapter.run(adapter.prepare(items, asked), asked).extractions
    assert found is not None
    return found


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return builders.gliformer(tmp_path_factory.mktemp("gliformer"))


@pytest.fixture(scope="module")
def adapter(folder: Path) -> GliformerModel:
    return GliformerModel.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, None))


def reference(folder: Path, max_length: int | None = None, bound: int | None = MAX_RELATION_ENTITIES) -> Any:
    """The library's model on the same folder, relating at most ``bound`` entities of a document (the
    library's own knob, unset by default; the adapter sets it to 100)."""
    model = GLiFormer.from_pretrained(
        str(folder), model_dir=str(folder), load_tokenizer=True, map_location="cpu", max_length=max_length
    )
    model.model.heads["joint_relex"].max_relation_entities = bound
    return model


@pytest.fixture(scope="module")
def library(folder: Path) -> Any:
    return reference(folder)


def alone(library: Any, text: str, **heads: Any) -> dict[str, Any]:
    """The library's answer for ``text`` by itself."""
    found = library.inference([text], batch_size=1, **heads)
    return {task: rows[0] for task, rows in found.items()}


def same_entities(ours: list[Any], theirs: list[dict[str, Any]]) -> None:
    expected = sorted(theirs, key=lambda one: (one["start"], one["end"]))
    assert [(e.text, e.label, e.start, e.end) for e in ours] == [
        (one["text"], one["label"], one["start"], one["end"]) for one in expected
    ]
    assert [e.score for e in ours] == pytest.approx([one["score"] for one in expected], abs=1e-5)


def test_embeddings_are_the_librarys_alone_and_in_a_batch(adapter: GliformerModel, library: Any) -> None:
    assert adapter.dims == {Capability.DENSE: 16}
    batched = adapter.run(adapter.prepare(TEXTS, DENSE), DENSE).dense
    assert batched is not None and batched.shape == (len(TEXTS), 16)
    reference = np.stack([library.embed_text([text], batch_size=1)[0].numpy() for text in TEXTS])
    cosine = (
        (batched * reference).sum(1) / np.linalg.norm(batched, axis=1) / np.linalg.norm(reference, axis=1)
    )
    assert cosine.min() >= 0.99999
    assert np.abs(batched - reference).max() < 1e-5


@pytest.mark.parametrize("threshold", [0.1, THRESHOLD, 0.5])
def test_entities_are_the_librarys_for_each_text_alone(
    adapter: GliformerModel, library: Any, threshold: float
) -> None:
    found = extract(adapter, TEXTS, forward(ENTITY_TYPES, {"threshold": threshold}))
    for text, ours in zip(TEXTS, found, strict=True):
        same_entities(ours.entities, alone(library, text, entities=ENTITY_TYPES, threshold=threshold)["ner"])
        assert ours.relations == ours.classifications == [] and ours.data == {}
    if threshold <= THRESHOLD:
        assert sum(len(one.entities) for one in found) >= 10  # the comparison is not of empty lists


def test_a_document_answers_alike_in_any_batch(adapter: GliformerModel) -> None:
    """The library scores a batch's padding like words: without the mask, a span ending a short text
    took it as its right neighbour, and padded words formed spans of their own."""
    for asked in (
        forward(ENTITY_TYPES, {"threshold": 0.1}),
        forward(ENTITY_TYPES, {"threshold": THRESHOLD, "relation_labels": RELATION_TYPES}),
        forward([], {"threshold": 0.2}, SCHEMA),
    ):
        batched = extract(adapter, TEXTS, asked)
        for text, ours in zip(TEXTS, batched, strict=True):
            (by_itself,) = extract(adapter, [text], asked)
            assert [(e.text, e.label, e.start) for e in ours.entities] == [
                (e.text, e.label, e.start) for e in by_itself.entities
            ]
            assert [e.score for e in ours.entities] == pytest.approx(
                [e.score for e in by_itself.entities], abs=1e-5
            )
            assert [(r.head, r.tail, r.relation) for r in ours.relations] == [
                (r.head, r.tail, r.relation) for r in by_itself.relations
            ]
            assert ours.data == by_itself.data


def test_relations_are_the_joint_heads_sorted_by_score(adapter: GliformerModel, library: Any) -> None:
    asked = forward(ENTITY_TYPES[:2], {"threshold": THRESHOLD, "relation_labels": RELATION_TYPES})
    found = extract(adapter, TEXTS, asked)
    heads = {"joint_relations": {None: {"entities": ENTITY_TYPES[:2], "relations": RELATION_TYPES}}}
    for text, ours in zip(TEXTS, found, strict=True):
        theirs = alone(library, text, threshold=THRESHOLD, **heads)
        same_entities(ours.entities, theirs["ner"])
        expected = sorted(
            (
                (one["head"]["text"], one["tail"]["text"], one["relation"], one["score"])
                for one in theirs["joint_relex"]
            ),
            key=lambda row: (-row[3], row[2], row[0], row[1]),
        )
        assert [(r.head, r.tail, r.relation) for r in ours.relations] == [row[:3] for row in expected]
        assert [r.score for r in ours.relations] == pytest.approx([row[3] for row in expected], abs=1e-5)
    assert sum(len(one.relations) for one in found) >= 20
    # relation_threshold raises the bar for relations alone; entities stay
    floor = float(np.median([r.score for one in found for r in one.relations]))
    raised = extract(
        adapter,
        TEXTS,
        forward(
            ENTITY_TYPES[:2],
            {"threshold": THRESHOLD, "relation_labels": RELATION_TYPES, "relation_threshold": floor},
        ),
    )
    for before, after in zip(found, raised, strict=True):
        assert after.entities == before.entities
        assert after.relations == [r for r in before.relations if r.score > floor]
    assert 0 < sum(len(one.relations) for one in raised) < sum(len(one.relations) for one in found)


def test_a_document_relates_only_its_most_confident_entities(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The joint head relates every pair of the entities it keeps, the best 100 of a document (a
    150-word document at threshold 0.1 would relate 22,000 pairs a relation type); here with a bound
    of 10 on a 40-word document whose every word is an entity."""
    monkeypatch.setattr(gliformer_adapter, "MAX_RELATION_ENTITIES", 10)
    adapter = GliformerModel.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, None))
    text = " ".join(" ".join(TEXTS).split()[:40])
    asked = forward(["person"], {"threshold": 0.1, "relation_labels": ["works at"]})
    (ours,) = extract(adapter, [text], asked)
    heads = {"joint_relations": {None: {"entities": ["person"], "relations": ["works at"]}}, "threshold": 0.1}
    bounded = alone(reference(folder, bound=10), text, **heads)["joint_relex"]
    assert sorted((r.head, r.tail, r.relation) for r in ours.relations) == sorted(
        (one["head"]["text"], one["tail"]["text"], one["relation"]) for one in bounded
    )
    unbounded = alone(reference(folder, bound=None), text, **heads)["joint_relex"]
    assert len(ours.entities) > 10
    assert 0 < len(ours.relations) <= 10 * 9 < len(unbounded)


def test_relations_between_the_entities_an_item_names(adapter: GliformerModel, library: Any) -> None:
    text = TEXTS[0]
    named = [
        {"text": "Ada Lovelace", "label": "person", "start": 0, "end": 12},
        {"text": "London", "label": "city", "start": 44, "end": 50},
        {"text": "Charles Babbage", "label": "person", "start": 25, "end": 40, "score": 0.9},
    ]
    (ours,) = extract(adapter, [text], forward(RELATION_TYPES, {"threshold": 0.1}), [{"entities": named}])
    assert [(e.text, e.label, e.start, e.end, e.score) for e in ours.entities] == [
        ("Ada Lovelace", "person", 0, 12, 1.0),
        ("London", "city", 44, 50, 1.0),
        ("Charles Babbage", "person", 25, 40, 0.9),
    ]
    heads = {"joint_relations": {None: {"entities": ["city", "person"], "relations": RELATION_TYPES}}}
    theirs = alone(library, text, threshold=0.1, **heads)["joint_relex"]
    names = {"Ada Lovelace", "London", "Charles Babbage"}
    expected = sorted(
        (one["head"]["text"], one["tail"]["text"], one["relation"], one["score"])
        for one in theirs
        if one["head"]["text"] in names and one["tail"]["text"] in names
    )
    assert (
        sorted((r.head, r.tail, r.relation, pytest.approx(r.score, abs=1e-5)) for r in ours.relations)
        == expected
    )
    assert {r.head for r in ours.relations} | {r.tail for r in ours.relations} <= names


def test_a_classification_task_and_label_groups(adapter: GliformerModel, library: Any) -> None:
    text = TEXTS[1]
    (ours,) = extract(
        adapter, [text], forward(["science", "business"], {"classification_task": "topic", "threshold": 0.0})
    )
    theirs = alone(library, text, classes={"topic": ["science", "business"]}, threshold=0.0)[
        "classification"
    ][0]
    assert [(c.label, pytest.approx(c.score, abs=1e-5)) for c in ours.classifications] == sorted(
        ((one["class_name"], one["score"]) for one in theirs), key=lambda pair: -pair[1]
    )
    assert ours.entities == []
    groups = {"topic": ["science", "business"], "tone": ["formal", "casual"]}
    (grouped,) = extract(
        adapter,
        [text],
        forward([], {"label_groups": groups, "classification_type": "multi-label", "threshold": 0.0}),
    )
    both = alone(library, text, classes=groups, threshold=0.0, multi_label=True)["classification"]
    expected = sorted(
        (
            (f"{name}.{one['class_name']}", one["score"])
            for name, row in zip(groups, both, strict=True)
            for one in row
        ),
        key=lambda pair: -pair[1],
    )
    assert [(c.label, pytest.approx(c.score, abs=1e-5)) for c in grouped.classifications] == expected
    assert len(expected) == 4  # multi-label: every class of both questions at threshold 0


def test_output_schema_is_answered_from_the_structuring_and_classification_heads(
    adapter: GliformerModel, library: Any
) -> None:
    plan = compile_schema(SCHEMA)
    found = extract(adapter, TEXTS, forward([], {"threshold": 0.2}, SCHEMA))
    # The root enum is a question in the same prompt: the library's answer to both at once, its
    # structure put through its own formatter (what its ``structure`` does).
    formatter = build_structuring_output_formatter(plan.template)
    for text, ours in zip(TEXTS, found, strict=True):
        theirs = alone(
            library, text, classes={"topic": ["science", "business"]}, structures=plan.template, threshold=0.2
        )
        structured = formatter.format_batch([theirs["structuring"]])[0]
        topic = theirs["classification"][0]
        choices = {"topic": max(topic, key=lambda one: one["score"])["class_name"]} if topic else {}
        assert ours.data == shape(plan, structured, choices)
        assert ours.entities == [] and ours.classifications == []
    assert sum(len(one.data) for one in found) >= 10
    assert all(set(one.data) <= set(SCHEMA["properties"]) for one in found)


def test_a_document_missing_a_required_property_fails_alone(adapter: GliformerModel) -> None:
    """As the public server answers it: that item's ``INFERENCE_ERROR`` with nothing else, while the
    documents that have every required property answer what they answer without ``required``."""
    people = {"type": "array", "items": {"type": "object", "properties": {"who": {"type": "string"}}}}
    schema = {**SCHEMA, "properties": {**SCHEMA["properties"], "people": people}}
    found = extract(adapter, TEXTS, forward([], {"threshold": 0.2}, {**schema, "required": ["tags"]}))
    plain = extract(adapter, TEXTS, forward([], {"threshold": 0.2}, schema))
    failed = [index for index, one in enumerate(found) if one.error is not None]
    assert failed == [index for index, one in enumerate(plain) if "tags" not in one.data]
    assert 0 < len(failed) < len(TEXTS), "every item or none failed: the test would be vacuous"
    for index, (ours, without) in enumerate(zip(found, plain, strict=True)):
        if index in failed:
            assert ours.error is not None and ours.error.code == "INFERENCE_ERROR"
            assert (
                ours.error.message == "GLiFormer did not extract required output_schema properties: ['tags']"
            )
            assert (ours.data, ours.entities, ours.classifications) == ({}, [], [])
        else:
            assert ours.error is None and ours.data == without.data


def test_cost_is_the_document_tokens_the_model_reads(adapter: GliformerModel) -> None:
    asked = forward(ENTITY_TYPES, {})
    costs = [
        prepared.cost for prepared in adapter.prepare([AnnotatedText(text, {}) for text in TEXTS], asked)
    ]
    processor = adapter._measurer
    for text, cost in zip(TEXTS, costs, strict=True):
        words = [word for word, _, _ in processor.words_splitter(text)]
        pieces = processor.transformer_tokenizer(words, is_split_into_words=True, add_special_tokens=False)
        assert cost == len(pieces["input_ids"]) + 2  # the text's tokens and the two specials
    long = " ".join(TEXTS * 20)  # past the 128-token window: cut to what the prompt leaves
    (cut,) = adapter.prepare([AnnotatedText(long, {})], asked)
    assert cut.cost < 128 and cut.cost > 100


@pytest.mark.parametrize(
    ("labels", "options", "schema", "message"),
    [
        ([], {}, None, "requires labels, label_groups, or output_schema"),
        (["person"], {"relations": ["x"]}, None, "relation types as options.relation_labels"),
        (["person"], {"relations": None}, None, "relation types as options.relation_labels"),
        (["person", "person"], {}, None, "labels must be unique"),
        (["x" * 129], {}, None, "at most 128 characters"),
        (["person"], {"threshold": 0.05}, None, "at least 0.1 when extracting"),
        (["person"], {"threshold": 1.5}, None, "threshold must be a finite number between 0 and 1"),
        (["person"], {"threshold": "high"}, None, "threshold must be a finite number"),
        ([], {"relation_labels": ["lives in"]}, None, "relation_labels require labels"),
        (["a"], {"relation_labels": [f"r{i}" for i in range(21)]}, None, "at most 20 relation types"),
        (
            ["a"],
            {"relation_labels": ["r"], "threshold": 0.5, "relation_threshold": 0.3},
            None,
            "relation_threshold must be at least threshold",
        ),
        ([], {"classification_task": "topic"}, None, "classification_task requires labels"),
        (
            ["a"],
            {"classification_task": "t", "label_groups": {"g": ["x"]}},
            None,
            "cannot be combined with classification_task",
        ),
        ([], {"label_groups": {"g": ["x"]}}, SCHEMA, "label_groups cannot be combined with output_schema"),
        ([], {"label_groups": []}, None, "label_groups must be a non-empty object"),
        (
            ["a"],
            {"classification_task": "t", "relation_labels": ["r"]},
            None,
            "cannot be combined with classification_task",
        ),
        (["a"], {"flat_ner": "yes"}, None, "flat_ner must be boolean"),
        (["a"], {"classification_type": "many"}, None, "classification_type must be"),
        (["a"], {"classification_type": "multi-label", "multi_label": False}, None, "contradicts"),
        ([f"label {i}" for i in range(300)], {}, None, "task prompt needs"),
        ([], {}, {"type": "array"}, "root type must be object"),
        (
            [],
            {},
            {"type": "object", "properties": {"a": {"type": "integer"}}},
            "supports string, string enum",
        ),
        (
            [],
            {},
            {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"enum": ["x"]}}}}},
            "only at the schema root",
        ),
        # Property names the library's template reader takes as its markers once it has unescaped
        # them: its prompt or its answer's formatter fails (the formatter in ``run``: the batch's 500).
        *(
            (
                [],
                {},
                {"type": "object", "properties": {name: {"type": "string"}, "other": {"type": "string"}}},
                "cannot build the task prompt",
            )
            for name in ("$type", "$items", "$enum", "$required", "!")
        ),
    ],
)
def test_requests_the_public_server_refuses_are_refused_before_any_work(
    adapter: GliformerModel,
    labels: list[str],
    options: dict[str, Any],
    schema: dict[str, Any] | None,
    message: str,
) -> None:
    with pytest.raises(UnsupportedInput, match=message):
        adapter.prepare([AnnotatedText(TEXTS[0], {})], forward(labels, options, schema))


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ([{"entities": [{"text": "Ada", "start": 0, "end": 3}]}, {}], "entities in every item metadata"),
        ([{"entities": [{"text": "Bob", "start": 0, "end": 3}]}] * 2, "valid character offsets"),
        (
            [{"entities": [{"text": "Ada", "start": 0, "end": 3, "score": 2}]}] * 2,
            "score must be a number between 0 and 1",
        ),
        ([{"entities": "Ada"}] * 2, "non-empty entities"),
    ],
)
def test_bad_named_entities_are_refused(
    adapter: GliformerModel, metadata: list[dict[str, Any]], message: str
) -> None:
    items = [AnnotatedText("Ada lived in London.", meta) for meta in metadata]
    with pytest.raises(UnsupportedInput, match=message):
        adapter.prepare(items, forward(["lives in"], {}))


def test_blank_text_is_refused_for_both_operations(adapter: GliformerModel) -> None:
    with pytest.raises(UnsupportedInput, match="non-blank text"):
        adapter.prepare(["  "], DENSE)
    with pytest.raises(UnsupportedInput, match="non-blank text"):
        adapter.prepare([AnnotatedText("\n", {})], forward(["person"], {}))


def test_the_labels_of_named_entities_count_against_the_request_budget(adapter: GliformerModel) -> None:
    """Each distinct label of the items' ``metadata.entities`` becomes prompt text: with the request's
    labels they may be 1,000 in all, as the public server counts them; 64 sets of 16 (each set a
    prompt that fits) were accepted, 1,025 labels in all."""
    items = [
        AnnotatedText(
            "Ada lived in London.",
            {
                "entities": [
                    {"text": "Ada", "start": 0, "end": 3, "label": f"t{k * 16 + j}"} for j in range(16)
                ]
            },
        )
        for k in range(64)
    ]
    with pytest.raises(UnsupportedInput, match="at most 1000 labels, relation types"):
        adapter.prepare(items, forward(["lives in"], {}))
    adapter.prepare(items[:62], forward(["lives in"], {}))  # 992 labels and the relation type


def test_a_null_multi_label_is_the_default(adapter: GliformerModel) -> None:
    """The public server reads ``multi_label: null`` as unset (its other flags it refuses when null)."""
    asked = forward(["science", "business"], {"classification_task": "topic", "multi_label": None})
    assert extract(adapter, [TEXTS[1]], asked) == extract(
        adapter, [TEXTS[1]], forward(["science", "business"], {"classification_task": "topic"})
    )
    with pytest.raises(UnsupportedInput, match="flat_ner must be boolean"):
        adapter.prepare([AnnotatedText(TEXTS[1], {})], forward(["person"], {"flat_ner": None}))


def test_half_precision_scores_reach_the_decoders_in_float32(folder: Path) -> None:
    """On a GPU the profiles run float16: a sigmoid of a logit above about 8.3 would round to 1.0
    there, tying near-certain spans. The model's score outputs are cast before the decoders read
    them (bfloat16 here, the half type a CPU runs)."""
    adapter = GliformerModel.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, None))
    torch.nn.Module.to(adapter._model, dtype=torch.bfloat16)
    seen: dict[str, torch.dtype] = {}
    adapter._model.model.register_forward_hook(
        lambda _module, _args, output: seen.update(
            {k: v.dtype for k, v in output.items() if k.endswith("_logits")}
        )
    )
    extract(
        adapter,
        TEXTS[:2],
        forward(ENTITY_TYPES[:2], {"threshold": THRESHOLD, "relation_labels": RELATION_TYPES}),
    )
    extract(adapter, TEXTS[:2], forward([], {"threshold": 0.2}, SCHEMA))
    assert {"ner_logits", "joint_rel_logits", "structuring_logits"} <= set(seen)
    assert set(seen.values()) == {torch.float32}


def test_a_backbone_with_absolute_positions_reads_at_most_its_table(folder: Path) -> None:
    """The built backbone holds 512 absolute positions: with the YAML's 2,048-token window a longer
    document reached the embeddings past the table (a RuntimeError, the batch's 500); the window
    stops at the table, and the library cuts the document there."""
    adapter = GliformerModel.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 2048))
    text = " ".join(TEXTS * 12)  # about 800 tokens
    asked = forward(["person"], {"threshold": 0.5})
    (prepared,) = adapter.prepare([AnnotatedText(text, {})], asked)
    assert prepared.cost < 512
    (found,) = adapter.run([prepared], asked).extractions or []
    assert all(entity.end is not None and entity.end <= len(text) for entity in found.entities)
    dense = adapter.run(adapter.prepare([text], DENSE), DENSE).dense
    assert dense is not None and dense.shape == (1, 16)
