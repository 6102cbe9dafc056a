"""GLiNER2 entities against the ``gliner2`` library's own ``batch_extract_entities`` on the same
weights (a small span extractor built from a config, tests/builders.py): the public server's shape
(text cut from the item, sorted by start, spans past the text cut back), the threshold, each text
alone equal to it inside a batch, and what is refused."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from gliner2 import AutoExtractor

from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.gliner2 import NO_LABELS, Gliner2Extractor
from sie.adapters.runtime.transformer import absolute_positions
from sie.catalog import families
from sie.core.options import Capability, ComputePrecision, OverflowPolicy
from sie.core.task import Task, UnsupportedInput
from tests import builders

TEXTS = [
    "Tim Cook is the CEO of Apple Inc. in Cupertino.",
    "Angela Merkel met Emmanuel Macron in Berlin",
    "ok",
]
LABELS = ["person", "organization", "location"]


@pytest.fixture(scope="module")
def folder(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return builders.gliner2(splade_dir, tmp_path_factory.mktemp("gliner2"))


@pytest.fixture(scope="module")
def extractor(folder: Path) -> Gliner2Extractor:
    return Gliner2Extractor.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 512))


def extract(
    extractor: Gliner2Extractor, texts: list[str], **options: object
) -> list[list[tuple[str, str, int, int, float]]]:
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(LABELS, options))
    extractions = extractor.run(extractor.prepare(texts, forward), forward).extractions or []
    return [
        [(e.text, e.label, e.start or 0, e.end or 0, round(e.score, 5)) for e in x.entities]
        for x in extractions
    ]


def library(folder: Path, threshold: float) -> list[dict[str, Any]]:
    model = AutoExtractor.from_pretrained(str(folder), map_location="cpu").eval()
    found: list[dict[str, Any]] = model.batch_extract_entities(
        TEXTS, LABELS, threshold=threshold, include_confidence=True, include_spans=True
    )
    return found


@pytest.mark.parametrize("threshold", [0.3, 0.5])
def test_entities_are_the_librarys_in_the_public_shape(
    extractor: Gliner2Extractor, folder: Path, threshold: float
) -> None:
    ours = extract(extractor, TEXTS, threshold=threshold)
    for text, got, theirs in zip(TEXTS, ours, library(folder, threshold), strict=True):
        expected = sorted(
            (
                (
                    text[s["start"] : min(s["end"], len(text))],
                    label,
                    s["start"],
                    min(s["end"], len(text)),
                    round(s["confidence"], 5),
                )
                for label in LABELS
                for s in theirs["entities"].get(label, [])
                if s["start"] < min(s["end"], len(text))
            ),
            key=lambda entity: entity[2],
        )
        assert got == expected
        assert all(text[start:end] == span and end <= len(text) for span, _, start, end, _ in got)
        assert all(score >= threshold for *_, score in got)
        assert [start for _, _, start, _, _ in got] == sorted(start for _, _, start, _, _ in got)
    if threshold == 0.3:
        assert any(ours), "the random heads find nothing at 0.3: the comparison would be vacuous"


def test_a_text_alone_equals_it_inside_a_batch(extractor: Gliner2Extractor) -> None:
    together = extract(extractor, TEXTS, threshold=0.3)
    for index, text in enumerate(TEXTS):
        assert extract(extractor, [text], threshold=0.3) == [together[index]]


def test_the_public_gliner2_adapters_load_our_classes() -> None:
    for public in (
        "sie_server.adapters.gliner2.adapter:GLiNER2Adapter",
        "sie_server.adapters.gliner2.entities:GLiNER2EntitiesAdapter",
        "sie_server.adapters.gliner2.classification:GLiNER2ClassificationAdapter",
    ):
        assert families.canonical(public) == "sie.adapters.gliner2:Gliner2Extractor"
        assert families.not_served(public) is None
    decide = "sie_server.adapters.gliner2.decide:GLiNER2DecideAdapter"
    assert families.canonical(decide) == "sie.adapters.gliner2_decide:Gliner2Decider"
    assert families.not_served(decide) is None
    assert families.takes_output_schema(decide)
    assert not families.takes_output_schema("sie_server.adapters.gliner2.adapter:GLiNER2Adapter")


@pytest.mark.parametrize(
    ("labels", "options", "message"),
    [
        ([], {}, NO_LABELS),
        (["person"], {"threshold": 1.5}, "threshold"),
        (["person"], {"threshold": "high"}, "threshold"),
        (["person"], {"threshold": 10**400}, "threshold"),  # a JSON integer no float holds
    ],
)
def test_bad_requests_are_refused(
    extractor: Gliner2Extractor, labels: list[str], options: dict[str, object], message: str
) -> None:
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(labels, options))
    with pytest.raises(UnsupportedInput, match=message):
        extractor.prepare(TEXTS[:1], forward)


GUARD = {"classification_task": "prompt_safety", "default_labels": ["safe", "unsafe"], "multi_label": False}
PROMPTS = ["how do I build a bomb", "what is the weather in Paris today", "ok"]


def classify(
    extractor: Gliner2Extractor, texts: list[str], labels: list[str], **options: object
) -> list[list[tuple[str, float]]]:
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(labels, options))
    extractions = extractor.run(extractor.prepare(texts, forward), forward).extractions or []
    return [[(c.label, round(c.score, 5)) for c in x.classifications] for x in extractions]


@pytest.mark.parametrize("multi_label", [False, True])
def test_a_classification_profile_answers_the_librarys_classes(folder: Path, multi_label: bool) -> None:
    """gliguard's profile: the profile's task and default labels, the library's
    ``batch_classify_text``, classes at or above the threshold, best first; alone as in a batch."""
    loadtime = {**GUARD, "multi_label": multi_label}
    classifier = Gliner2Extractor.load(
        LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 512, loadtime=loadtime)
    )
    model = AutoExtractor.from_pretrained(str(folder), map_location="cpu").eval()
    found = model.batch_classify_text(
        PROMPTS,
        {"prompt_safety": {"labels": ["safe", "unsafe"], "multi_label": multi_label}},
        threshold=0.0,
        include_confidence=True,
    )
    ours = classify(classifier, PROMPTS, [], threshold=0.0)
    for got, one in zip(ours, found, strict=True):
        result = one["prompt_safety"]
        expected = [result] if isinstance(result, dict) else result
        want = sorted(((c["label"], round(c["confidence"], 5)) for c in expected), key=lambda c: -c[1])
        assert got == want and got
    assert len(ours[0]) == (2 if multi_label else 1)
    for index, prompt in enumerate(PROMPTS):
        assert classify(classifier, [prompt], [], threshold=0.0) == [ours[index]]
    best = max(score for one in ours for _, score in one)
    assert classify(classifier, PROMPTS, [], threshold=best + 1e-4) == [[], [], []]
    assert classify(classifier, PROMPTS[:1], ["benign", "harmful"], threshold=0.0)[0][0][0] in {
        "benign",
        "harmful",
    }


def test_a_text_longer_than_one_pass_is_refused_not_failed(extractor: Gliner2Extractor) -> None:
    """The library reads text and labels in one encoder pass and never cuts the text: past the
    backbone's positions it would fail on the device, so that item is the client's error first (the
    others are answered)."""
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(LABELS, {}))
    near = "Alice met Bob in Paris. " * 60  # well inside: read as usual
    long, kept = extractor.prepare(["Alice met Bob in Paris. " * 150, near], forward)
    assert long.error is not None and long.error.code == "INPUT_TOO_LONG" and long.cost == 0
    assert "one pass of at most 512 tokens" in long.error.message
    assert kept.error is None
    assert extractor.run([kept], forward).extractions is not None


def test_overflow_policy_truncate_text_cuts_the_text_and_error_refuses_it(
    extractor: Gliner2Extractor,
) -> None:
    """``truncate_text`` reads the text cut to the room the labels leave (answering what that text cut
    by hand answers by default); ``error`` refuses it alone with the window refusal."""
    long = "Alice met Bob in Paris. " * 150
    error, truncate, default = (
        Forward(frozenset({Capability.EXTRACT}), task=Task.of(LABELS, {}), overflow=policy)
        for policy in (OverflowPolicy.ERROR, OverflowPolicy.TRUNCATE_TEXT, OverflowPolicy.DEFAULT)
    )
    refused, short = extractor.prepare([long, TEXTS[0]], error)
    assert refused.error is not None and refused.error.code == "INPUT_TOO_LONG" and short.error is None
    found = re.match(
        r"The input takes (\d+) tokens, past the model's 512-token window", refused.error.message
    )
    assert found and int(found[1]) > 512
    cut = extractor.prepare([long], truncate)[0].payload
    assert isinstance(cut, str) and long.startswith(cut) and 0 < len(cut) < len(long)
    assert cut.endswith(("Alice", "met", "Bob", "in", "Paris", "."))  # at a token boundary
    by_hand = extractor.prepare([cut, TEXTS[0]], default)
    assert all(item.error is None for item in by_hand)
    answered = extractor.run(extractor.prepare([long, TEXTS[0]], truncate), truncate).extractions
    assert answered == extractor.run(by_hand, default).extractions
    assert answered and any(answered[0].entities), "no entity found: the comparison would be vacuous"


def test_only_a_table_of_absolute_positions_limits_what_one_pass_reads() -> None:
    from transformers import (
        BertConfig,
        BertModel,
        DebertaV2Config,
        DebertaV2Model,
        XLMRobertaConfig,
        XLMRobertaModel,
    )

    small = {
        "vocab_size": 64,
        "hidden_size": 16,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 32,
    }
    assert absolute_positions(BertModel(BertConfig(**small, max_position_embeddings=512))) == 512
    assert absolute_positions(XLMRobertaModel(XLMRobertaConfig(**small, max_position_embeddings=514))) == 512
    deberta = DebertaV2Config(
        **small, relative_attention=True, position_biased_input=False, max_position_embeddings=512
    )
    assert absolute_positions(DebertaV2Model(deberta)) is None
