"""GLiClass against the ``gliclass`` library's own pipeline on the same weights (a small uni-encoder
built from a config, tests/builders.py): single- and multi-label scores, the instruction as the
pipeline's prompt, labels before or after the text, each text alone equal to it inside a batch, and
the requests the public server refuses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gliclass import GLiClassModel, ZeroShotClassificationPipeline
from transformers import AutoTokenizer

from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.gliclass import NO_LABELS, GliclassClassifier
from sie.core.options import Capability, ComputePrecision, OverflowPolicy
from sie.core.task import Task, UnsupportedInput
from tests import builders

TEXTS = [
    "The central bank raised interest rates again to fight inflation.",
    "Messi scored twice in the final.",
    "ok",
    "A new vaccine trial reported strong results against the flu, while markets rallied and the league "
    "postponed two matches because of the storm that hit the coast overnight.",
]
LABELS = ["economy", "sports", "health", "weather"]
LENGTH = 256


@pytest.fixture(scope="module", params=[False, True], ids=["text-first", "prompt-first"])
def folder(
    request: pytest.FixtureRequest, splade_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    return builders.gliclass(splade_dir, tmp_path_factory.mktemp("gliclass"), prompt_first=request.param)


def reference(folder: Path, kind: str, prompt: str | None = None) -> list[list[dict[str, float]]]:
    model = GLiClassModel.from_pretrained(str(folder))
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    pipe = ZeroShotClassificationPipeline(
        model, tokenizer, max_length=LENGTH, classification_type=kind, device="cpu", progress_bar=False
    )
    out: list[list[dict[str, float]]] = pipe(TEXTS, LABELS, threshold=0.0, prompt=prompt)
    return out


def classify(classifier: GliclassClassifier, texts: list[str], **options: object) -> list[dict[str, float]]:
    instruction = options.pop("instruction", None)
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(LABELS, options, instruction))  # type: ignore[arg-type]
    extractions = classifier.run(classifier.prepare(texts, forward), forward).extractions
    assert extractions is not None
    return [{c.label: c.score for c in e.classifications} for e in extractions]


@pytest.fixture(scope="module")
def classifier(folder: Path) -> GliclassClassifier:
    return GliclassClassifier.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, LENGTH))


@pytest.mark.parametrize("instruction", [None, "Classify the news topic"])
def test_multi_label_scores_equal_the_pipeline(
    classifier: GliclassClassifier, folder: Path, instruction: str | None
) -> None:
    ours = classify(classifier, TEXTS, classification_type="multi-label", instruction=instruction)
    for got, expected in zip(ours, reference(folder, "multi-label", instruction), strict=True):
        assert list(got) == sorted(got, key=lambda label: -got[label])  # best first
        assert set(got) == set(LABELS)
        for entry in expected:
            assert got[entry["label"]] == pytest.approx(entry["score"], abs=1e-6)


def test_single_label_best_equals_the_pipeline_and_scores_sum_to_one(
    classifier: GliclassClassifier, folder: Path
) -> None:
    ours = classify(classifier, TEXTS)
    for got, (expected,) in zip(ours, reference(folder, "single-label"), strict=True):
        best = next(iter(got))
        assert best == expected["label"] and got[best] == pytest.approx(expected["score"], abs=1e-6)
        assert sum(got.values()) == pytest.approx(1.0, abs=1e-5)


def test_a_text_alone_equals_it_inside_a_batch(classifier: GliclassClassifier) -> None:
    together = classify(classifier, TEXTS, classification_type="multi-label")
    for index in (0, 2, 3):
        (alone,) = classify(classifier, [TEXTS[index]], classification_type="multi-label")
        assert alone == pytest.approx(together[index], abs=1e-6)


def test_threshold_keeps_the_labels_at_or_above_it(classifier: GliclassClassifier) -> None:
    (scores,) = classify(classifier, TEXTS[:1], classification_type="multi-label")
    cut = float(np.median(list(scores.values())))
    (kept,) = classify(classifier, TEXTS[:1], classification_type="multi-label", threshold=cut)
    assert kept == {label: score for label, score in scores.items() if score >= cut}


def test_one_label_stands_alone_rather_than_always_scoring_one(classifier: GliclassClassifier) -> None:
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(["sports"], {}))
    (extraction,) = classifier.run(classifier.prepare(TEXTS[1:2], forward), forward).extractions or []
    assert 0.0 < extraction.classifications[0].score < 1.0


@pytest.mark.parametrize(
    ("labels", "options", "message"),
    [
        ([], {}, NO_LABELS),
        (["a", "a"], {}, "unique"),
        (["a", " "], {}, "non-empty"),
        (["a"], {"threshold": 2}, "threshold"),
        (["a"], {"threshold": True}, "threshold"),
        (["a"], {"classification_type": "both"}, "classification_type"),
    ],
)
def test_bad_requests_are_refused(
    classifier: GliclassClassifier, labels: list[str], options: dict[str, object], message: str
) -> None:
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(labels, options))
    with pytest.raises(UnsupportedInput, match=message):
        classifier.prepare(TEXTS[:1], forward)


def test_a_text_that_would_push_the_labels_out_is_refused_alone(classifier: GliclassClassifier) -> None:
    """That item fails with the public ``INPUT_TOO_LONG`` and costs nothing; the text beside it is
    prepared as it is alone."""
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(LABELS, {}))
    long, short = classifier.prepare([" ".join(["storm"] * 400), TEXTS[0]], forward)
    assert long.error is not None and long.error.code == "INPUT_TOO_LONG" and long.cost == 0
    assert long.error.message.startswith("The text and labels take ")
    assert long.error.message.endswith("tokens; GLiClass reads at most 256: shorten the text")
    (alone,) = classifier.prepare([TEXTS[0]], forward)
    assert short.error is None and (short.cost, short.payload) == (alone.cost, alone.payload)


def test_overflow_policy_truncate_text_cuts_the_text_and_error_refuses_it(
    classifier: GliclassClassifier, folder: Path
) -> None:
    """As the public adapter: ``truncate_text`` cuts the text to the room the labels leave (answering
    what the text cut by hand answers), ``error`` refuses it alone with its whole layout's tokens."""
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    pipe = ZeroShotClassificationPipeline(
        GLiClassModel.from_pretrained(str(folder)),
        tokenizer,
        max_length=LENGTH,
        device="cpu",
        progress_bar=False,
    ).pipe

    def tokens(text: str) -> int:
        return len(tokenizer(pipe.prepare_input(text, LABELS, None, None))["input_ids"])

    long = " ".join(["storm"] * 400)
    fits = max(k for k in range(400) if tokens(" ".join(["storm"] * k)) <= LENGTH)
    by_hand = " ".join(["storm"] * fits)
    assert 0 < fits < 400
    error, truncate = (
        Forward(frozenset({Capability.EXTRACT}), task=Task.of(LABELS, {}), overflow=policy)
        for policy in (OverflowPolicy.ERROR, OverflowPolicy.TRUNCATE_TEXT)
    )
    refused, short = classifier.prepare([long, TEXTS[0]], error)
    assert refused.error is not None and refused.error.code == "INPUT_TOO_LONG" and short.error is None
    assert refused.error.message.startswith(
        f"The input takes {tokens(long)} tokens, past the model's {LENGTH}-token window"
    )
    cut, _ = classifier.prepare([long, TEXTS[0]], truncate)
    assert cut.payload == by_hand
    answered = classifier.run(classifier.prepare([long, TEXTS[0]], truncate), truncate).extractions
    assert answered == classifier.run(classifier.prepare([by_hand, TEXTS[0]], truncate), truncate).extractions
    by_default = Forward(frozenset({Capability.EXTRACT}), task=Task.of(LABELS, {}))
    assert (
        answered
        == classifier.run(classifier.prepare([by_hand, TEXTS[0]], by_default), by_default).extractions
    )
    assert classifier.prepare([long], by_default)[0].error is not None  # by default it is refused
