"""Zero-shot classification against transformers' ``pipeline("zero-shot-classification")`` on the same
weights: a tiny NLI model (the packaged tiny BERT with a seeded three-class head, tests/builders.py),
with the entailment class last (MNLI) and first, single- and multi-label, default and custom templates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from transformers import pipeline

from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.nli_zero_shot import DEFAULT_TEMPLATE, NEEDS_LABELS, NliZeroShotClassifier
from sie.core.extraction import Classification
from sie.core.options import Capability, ComputePrecision
from sie.core.task import Task, UnsupportedInput
from tests import builders
from tests.conftest import package_folder

TEXTS = [
    "The central bank raised interest rates again to fight inflation.",
    "Messi scored twice in the final.",
    "ok",
    "A new vaccine trial reported strong results against the flu, while markets rallied and the league "
    "postponed two matches because of the storm that hit the coast overnight.",
]
LABELS = ["economy", "sports", "health", "weather"]


def extract(labels: list[str], **options: Any) -> Forward:
    return Forward(frozenset({Capability.EXTRACT}), task=Task.of(labels, options))


def classify(
    adapter: NliZeroShotClassifier, texts: list[str], forward: Forward
) -> list[list[Classification]]:
    out = adapter.run(adapter.prepare(texts, forward), forward)
    assert out.extractions is not None
    return [one.classifications for one in out.extractions]


@pytest.fixture(scope="module", params=sorted(builders.NLI_ORDERS))
def nli_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return builders.nli(package_folder("cognition", "model"), tmp_path_factory.mktemp("nli"), request.param)


@pytest.fixture(scope="module")
def ours(nli_dir: Path) -> NliZeroShotClassifier:
    return NliZeroShotClassifier.load(LoadSpec(nli_dir, "cpu", ComputePrecision.FLOAT32, 512))


@pytest.fixture(scope="module")
def reference(nli_dir: Path) -> Any:
    return pipeline("zero-shot-classification", model=str(nli_dir), device="cpu")


@pytest.mark.parametrize(
    ("labels", "options"),
    [
        (LABELS, {}),
        (LABELS, {"multi_label": True}),
        (LABELS, {"hypothesis_template": "Topic: {}"}),
        (LABELS[:1], {}),  # one label: each label on its own, as the pipeline does
    ],
)
def test_equals_the_pipeline(
    ours: NliZeroShotClassifier, reference: Any, labels: list[str], options: dict[str, Any]
) -> None:
    template = options.get("hypothesis_template", DEFAULT_TEMPLATE)
    batched = classify(ours, TEXTS, extract(labels, **options))
    for text, got in zip(TEXTS, batched, strict=True):
        expected = reference(
            text,
            candidate_labels=labels,
            hypothesis_template=template,
            multi_label=options.get("multi_label", False),
        )
        assert [c.label for c in got] == expected["labels"]
        np.testing.assert_allclose([c.score for c in got], expected["scores"], atol=1e-5)
        assert [c.label for c in classify(ours, [text], extract(labels, **options))[0]] == expected["labels"]
    scores = np.array([[c.score for c in got] for got in batched])
    assert np.ptp(scores) > 1e-3  # the texts and labels really differ, so equality is not vacuous
    if options.get("multi_label") or len(labels) == 1:
        assert (scores > 0).all() and (scores < 1).all()
    else:
        np.testing.assert_allclose(scores.sum(axis=1), 1.0, atol=1e-5)


def test_items_weigh_their_pairs(ours: NliZeroShotClassifier) -> None:
    (item,) = ours.prepare([TEXTS[0]], extract(LABELS))
    assert len(item.payload) == len(LABELS)
    assert item.cost == sum(len(pair.ids) for pair in item.payload)


def test_refusals(ours: NliZeroShotClassifier) -> None:
    with pytest.raises(UnsupportedInput, match=NEEDS_LABELS):
        ours.prepare(["a text"], extract([]))
    with pytest.raises(UnsupportedInput, match="where the label goes"):
        ours.prepare(["a text"], extract(LABELS, hypothesis_template="No slot."))
    with pytest.raises(UnsupportedInput, match="multi_label"):
        ours.prepare(["a text"], extract(LABELS, multi_label=3))
    with pytest.raises(UnsupportedInput, match="not query-document pairs"):
        ours.prepare([("a", "b")], extract(LABELS))


def test_long_texts_are_truncated_not_their_hypotheses(nli_dir: Path, reference: Any) -> None:
    short = NliZeroShotClassifier.load(LoadSpec(nli_dir, "cpu", ComputePrecision.FLOAT32, 24))
    forward = extract(LABELS)
    (item,) = short.prepare([TEXTS[3]], forward)
    whole = [ours_pair.ids for ours_pair in short.prepare(["x"], forward)[0].payload]
    for pair, hypothesis in zip(item.payload, whole, strict=True):
        assert len(pair.ids) == 24
        tail = hypothesis[2:]  # [CLS] x [SEP] hypothesis [SEP] -> hypothesis [SEP]
        np.testing.assert_array_equal(pair.ids[-len(tail) :], tail)
    reference.tokenizer.model_max_length = 24
    try:
        expected = reference(TEXTS[3], candidate_labels=LABELS, hypothesis_template=DEFAULT_TEMPLATE)
    finally:
        reference.tokenizer.model_max_length = 512
    (got,) = classify(short, [TEXTS[3]], forward)
    assert [c.label for c in got] == expected["labels"]
    np.testing.assert_allclose([c.score for c in got], expected["scores"], atol=1e-5)


@pytest.mark.parametrize("multi", [False, True])
def test_deberta_without_tokenizer_json_equals_the_pipeline(tmp_path: Path, multi: bool) -> None:
    """DeBERTa-v2/v3, the public zero-shot ids' backbone: the padded transformers forward and the
    tokenizer converted from ``spm.model`` (no tokenizer.json in the folder), held to the pipeline."""
    folder = builders.deberta_nli(tmp_path / "deberta")
    assert not (folder / "tokenizer.json").exists()
    ours = NliZeroShotClassifier.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 128))
    assert ours.entailment == 0
    reference = pipeline("zero-shot-classification", model=str(folder), device="cpu")
    texts = ["The central bank raised interest rates.", "Messi scored twice in the final of the league."]
    labels = ["economy", "sports", "health"]
    for text, got in zip(texts, classify(ours, texts, extract(labels, multi_label=multi)), strict=True):
        expected = reference(
            text, candidate_labels=labels, hypothesis_template=DEFAULT_TEMPLATE, multi_label=multi
        )
        assert [c.label for c in got] == expected["labels"]
        np.testing.assert_allclose([c.score for c in got], expected["scores"], atol=1e-5)
