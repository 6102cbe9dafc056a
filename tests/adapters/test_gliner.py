"""GLiNER extraction against the ``gliner`` library's own ``predict_entities`` on the same weights.

No GLiNER ships on PyPI, so the tests build one over the packaged tiny BERT (tests/builders.py) with a
head wide enough that some spans clear the threshold. Its entities are meaningless; that ours are the
library's (spans, labels, offsets, scores), alone and batched with texts of other lengths, is the point.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gliner import GLiNER

from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.gliner import (
    MIN_ADJACENCY,
    NO_LABELS,
    NO_RELATIONS,
    GlinerExtractor,
    best_relations,
    merge_adjacent,
    span_entity,
)
from sie.adapters.runtime.word_windows import MAX_WINDOWS, owned, plan_windows, resolve_overlaps
from sie.core.extraction import Entity
from sie.core.options import Capability, ComputePrecision
from sie.core.task import Task, UnsupportedInput
from tests import builders

LABELS = ["person", "location", "organization"]
TEXTS = [
    "Alice lives in Paris.",
    "Bob has worked at Google in Mountain View, California, since 2019, and before that at a bakery.",
    "ok",
    " ".join(["Marie Curie was born in Warsaw and worked in Paris at the Sorbonne."] * 6),
]


def extract(folder_of: Any, options: dict[str, Any], texts: list[str]) -> list[list[Entity]]:
    adapter: GlinerExtractor = folder_of["adapter"]
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(LABELS, options))
    outputs = adapter.run(adapter.prepare(texts, forward), forward).extractions
    assert outputs is not None
    return [one.entities for one in outputs]


@pytest.fixture(scope="module")
def span_model(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = builders.gliner(splade_dir, tmp_path_factory.mktemp("gliner"))
    return {
        "reference": GLiNER.from_pretrained(str(folder), local_files_only=True),
        "adapter": GlinerExtractor.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, None)),
    }


def assert_same(ours: list[Entity], reference: list[dict[str, Any]], text: str) -> None:
    assert [(e.text, e.label, e.start, e.end) for e in ours] == [
        (r["text"], r["label"], r["start"], r["end"]) for r in reference
    ]
    for entity, expected in zip(ours, reference, strict=True):
        assert entity.score == pytest.approx(expected["score"], abs=1e-5)
        assert entity.start is not None and text[entity.start : entity.end] == entity.text


@pytest.mark.parametrize(
    "options",
    [{}, {"threshold": 0.55}, {"threshold": 0.45, "flat_ner": False, "multi_label": True}],
    ids=["defaults", "threshold", "nested-multi-label"],
)
def test_entities_equal_gliner_predict_entities_alone_and_batched(
    span_model: dict[str, Any], options: dict[str, Any]
) -> None:
    reference = [
        span_model["reference"].predict_entities(
            text,
            LABELS,
            threshold=options.get("threshold", 0.5),
            flat_ner=options.get("flat_ner", True),
            multi_label=options.get("multi_label", False),
        )
        for text in TEXTS
    ]
    assert sum(map(len, reference)) >= 3, "the head is too weak for any span to clear the threshold"
    for text, expected in zip(TEXTS, reference, strict=True):
        (alone,) = extract(span_model, options, [text])
        assert_same(alone, expected, text)
    for text, ours, expected in zip(TEXTS, extract(span_model, options, TEXTS), reference, strict=True):
        assert_same(ours, expected, text)


# The tiny bi-encoder's config has no class-token index, so each load of it warns that gliner does not
# resize a bi-encoder's embeddings; and gliner warns when it cuts a text to ``max_len`` words.
@pytest.mark.filterwarnings("ignore:Resizing embeddings is not supported for bi-encoder models")
@pytest.mark.filterwarnings("ignore:Sentence of length")
def test_bi_encoder_entities_equal_gliner_and_a_text_past_max_len_is_read_in_windows(
    splade_dir: Path, tmp_path: Path
) -> None:
    """GLiNER-bi (labels through their own encoder) runs through the same adapter unchanged; a
    loadtime ``max_len`` reaches the library, and a text longer than it is read in overlapping
    windows: its entities are the library's on each window, each taken from the window that owns
    its first word, so entities past the first ``max_len`` words are found too."""
    folder = builders.gliner(splade_dir, tmp_path / "bi", bi_encoder=True)
    reference = GLiNER.from_pretrained(str(folder), local_files_only=True)
    assert type(reference).__name__ == "BiEncoderSpanGLiNER"
    model = {"adapter": GlinerExtractor.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, None))}
    options = {"threshold": 0.45, "precompute_labels": True}
    expected = [reference.predict_entities(text, LABELS, threshold=0.45) for text in TEXTS]
    assert sum(map(len, expected)) >= 3
    for text, ours, want in zip(TEXTS, extract(model, options, TEXTS), expected, strict=True):
        assert_same(ours, want, text)
    short = {
        "adapter": GlinerExtractor.load(
            LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, None, {"max_len": 24})
        )
    }
    text = TEXTS[3]  # 78 words: windows of 24 sharing 12
    (windowed,) = extract(short, options, [text])
    library = GLiNER.from_pretrained(str(folder), local_files_only=True, max_length=24)
    words = [(start, end) for _, start, end in library.data_processor.words_splitter(text)]
    windows = plan_windows(words, 24, len(text))
    assert [(w.start, w.end) for w in windows][:2] == [
        (words[0][0], words[23][1]),
        (words[12][0], words[35][1]),
    ]
    per_window = [
        owned(
            w,
            [span_entity(r) for r in library.predict_entities(text[w.start : w.end], LABELS, threshold=0.45)],
            text,
        )
        for w in windows
    ]
    want = resolve_overlaps([e for found in per_window for e in found], flat=True, multi_label=False)
    assert [(e.text, e.label, e.start, e.end) for e in windowed] == [
        (e.text, e.label, e.start, e.end) for e in want
    ]
    assert [e.score for e in windowed] == pytest.approx([e.score for e in want], abs=1e-5)
    assert all(text[e.start or 0 : e.end] == e.text for e in windowed)
    assert max(e.end or 0 for e in windowed) > words[24][0]  # found past the first window
    one_window = library.predict_entities(text, LABELS, threshold=0.45)  # the library alone: 24 words
    assert max(e["end"] for e in one_window) <= words[23][1]


def test_a_text_needing_more_windows_than_allowed_is_refused_alone(splade_dir: Path, tmp_path: Path) -> None:
    """That item is refused with the public ``INPUT_TOO_LONG`` (its ``items[i].error``), costs
    nothing, and never reaches ``run``; the texts beside it are prepared as they are alone."""
    folder = builders.gliner(splade_dir, tmp_path / "g")
    adapter = GlinerExtractor.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, None, {"max_len": 2}))
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(LABELS, {}))
    fits = " ".join(["word"] * (MAX_WINDOWS + 1))  # windows of 2 words advancing by 1
    (item,) = adapter.prepare([fits], forward)
    assert len(item.payload.windows) == MAX_WINDOWS and item.cost > len(item.ids) and item.error is None
    before, refused, after = adapter.prepare(["Alice", fits + " more", fits], forward)
    assert refused.error is not None and refused.cost == 0 and refused.payload is None
    assert refused.error.code == "INPUT_TOO_LONG"
    assert refused.error.message == (
        f"GLiNER reads at most {MAX_WINDOWS} windows of 2 words; this text has {MAX_WINDOWS + 2} words: "
        "split it into shorter items"
    )
    assert (before.error, after.error) == (None, None)
    assert after.cost == item.cost and after.payload == item.payload


def test_threshold_keeps_fewer_entities(span_model: dict[str, Any]) -> None:
    low = extract(span_model, {"threshold": 0.45}, TEXTS)
    high = extract(span_model, {"threshold": 0.6}, TEXTS)
    assert sum(map(len, high)) < sum(map(len, low))
    assert all(e.score >= 0.6 for found in high for e in found)


def test_usage_tokens_are_the_backbone_tokens_with_specials(span_model: dict[str, Any]) -> None:
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(LABELS, {}))
    (item,) = span_model["adapter"].prepare(["Alice lives in Paris."], forward)
    assert item.cost == 7 and item.payload.text == "Alice lives in Paris."  # the public server bills 7


@pytest.mark.parametrize(
    ("labels", "options", "text", "message"),
    [
        ([], {}, "Alice lives in Paris.", NO_LABELS),
        (LABELS, {}, "   ", "GLiNER requires non-blank text for extraction"),
        (LABELS, {"threshold": 1.5}, "Alice", "GLiNER threshold must be a finite number between 0 and 1"),
        (LABELS, {"threshold": "high"}, "Alice", "GLiNER threshold must be a finite number between 0 and 1"),
        (LABELS, {"threshold": 10**400}, "Alice", "GLiNER threshold must be a finite number between 0 and 1"),
        (
            LABELS,
            {"relation_threshold": 2},
            "Alice",
            "GLiNER relation_threshold must be a finite number between 0 and 1",
        ),
        (LABELS, {"flat_ner": "false"}, "Alice", "GLiNER flat_ner must be true or false"),
        (LABELS, {"relation_labels": ["works at"]}, "Alice", NO_RELATIONS),
    ],
)
def test_bad_requests_are_refused_with_the_public_messages(
    span_model: dict[str, Any], labels: list[str], options: dict[str, Any], text: str, message: str
) -> None:
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(labels, options))
    with pytest.raises(UnsupportedInput) as refused:
        span_model["adapter"].prepare([text], forward)
    assert str(refused.value) == message


def test_token_level_model_merges_adjacent_words_when_asked(splade_dir: Path, tmp_path: Path) -> None:
    """A NuNER-Zero-like model scores words; merging joins neighbouring words of one label into one
    entity that still slices back to the text, and covers exactly the characters the words did."""
    folder = builders.gliner(splade_dir, tmp_path / "token", span_mode="token_level")
    model = {"adapter": GlinerExtractor.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, None))}
    reference = GLiNER.from_pretrained(str(folder), local_files_only=True)
    text = TEXTS[1]
    (words,) = extract(model, {"threshold": 0.3}, [text])
    assert_same(words, reference.predict_entities(text, LABELS, threshold=0.3), text)
    (merged,) = extract(model, {"threshold": 0.3, "merge_adjacent_entities": True}, [text])
    assert len(merged) < len(words)
    assert merged == merge_adjacent(words, text)
    for entity in merged:
        assert entity.start is not None and text[entity.start : entity.end] == entity.text
        assert entity.score == max(w.score for w in words if entity.start <= w.start < entity.end)  # type: ignore[operator]


def test_merge_adjacent_joins_only_touching_entities_of_one_label() -> None:
    text = "Steve Jobs met Tim Cook"
    parts = [
        Entity("Steve", "person", 0.6, 0, 5),
        Entity("Jobs", "person", 0.9, 6, 10),
        Entity("met", "event", 0.7, 11, 14),
        Entity("Tim", "person", 0.8, 15, 18),
        Entity("Cook", "person", 0.5, 19, 23),
    ]
    assert merge_adjacent(parts, text) == [
        Entity("Steve Jobs", "person", 0.9, 0, 10),
        Entity("met", "event", 0.7, 11, 14),
        Entity("Tim Cook", "person", 0.8, 15, 23),
    ]


RELATIONS = ["works at", "lives in", "born in"]


@pytest.fixture(scope="module")
def relex_model(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = builders.gliner(splade_dir, tmp_path_factory.mktemp("gliner-relex"), relations=True)
    return {
        "reference": GLiNER.from_pretrained(str(folder), local_files_only=True),
        "adapter": GlinerExtractor.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, None)),
    }


def test_a_relex_model_answers_gliners_relations_alone_and_batched(relex_model: dict[str, Any]) -> None:
    """A joint entity-relation model (knowledgator/gliner-relex): with ``relation_labels`` the
    relations are gliner's ``inference`` ones, each (head, tail, relation) once at its best score,
    best first. Without ``relation_labels`` it answers gliner's entities alone."""
    texts = TEXTS[:3]
    options = {"threshold": 0.5, "relation_labels": RELATIONS, "relation_threshold": 0.6}
    entities, relations = relex_model["reference"].inference(
        texts,
        LABELS,
        relations=RELATIONS,
        threshold=0.5,
        relation_threshold=0.6,
        adjacency_threshold=max(0.5, MIN_ADJACENCY),
        return_relations=True,
    )
    assert sum(map(len, relations)) >= 2, "the head is too weak for any relation to clear the threshold"
    adapter: GlinerExtractor = relex_model["adapter"]
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(LABELS, options))
    batched = adapter.run(adapter.prepare(texts, forward), forward).extractions
    assert batched is not None
    for index, text in enumerate(texts):
        (alone,) = adapter.run(adapter.prepare([text], forward), forward).extractions or []
        for ours in (alone, batched[index]):
            assert_same(ours.entities, entities[index], text)
            expected = best_relations(relations[index])
            assert [(r.head, r.tail, r.relation) for r in ours.relations] == [
                (r.head, r.tail, r.relation) for r in expected
            ]
            assert [r.score for r in ours.relations] == pytest.approx([r.score for r in expected], abs=1e-5)
    entities_only = Forward(forward.outputs, task=Task.of(LABELS, {"threshold": 0.5}))
    plain = adapter.run(adapter.prepare(texts, entities_only), entities_only)
    assert [one.relations for one in plain.extractions or []] == [[], [], []]
    alone_entities = relex_model["reference"].inference(
        texts, LABELS, threshold=0.5, adjacency_threshold=max(0.5, MIN_ADJACENCY), return_relations=False
    )
    for index, text in enumerate(texts):
        assert_same((plain.extractions or [])[index].entities, alone_entities[index], text)


def test_best_relations_keeps_each_triple_once_at_its_best_score() -> None:
    def found(head: str, tail: str, relation: str, score: float) -> dict[str, Any]:
        return {"head": {"text": head}, "tail": {"text": tail}, "relation": relation, "score": score}

    relations = best_relations(
        [
            found("Bob", "Google", "works at", 0.7),
            found("Bob", "Google", "works at", 0.9),
            found("Bob", "Paris", "lives in", 0.8),
        ]
    )
    assert [(r.head, r.tail, r.relation, r.score) for r in relations] == [
        ("Bob", "Google", "works at", 0.9),
        ("Bob", "Paris", "lives in", 0.8),
    ]
