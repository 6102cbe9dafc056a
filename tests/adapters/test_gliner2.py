"""GLiNER2 entities against the ``gliner2`` library's own ``batch_extract_entities`` on the same
weights (a small span extractor built from a config, tests/builders.py): the public server's shape
(text cut from the item, sorted by start, spans past the text cut back), the threshold, each text
alone equal to it inside a batch, and what is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gliner2 import AutoExtractor

from sie.adapters import registry
from sie.adapters.base import Forward, LoadSpec, Task, UnsupportedInput
from sie.adapters.gliner2 import NO_LABELS, Gliner2Extractor
from sie.core.options import Capability, ComputePrecision
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


def test_the_public_entity_adapters_load_this_class_and_the_other_modes_are_refused() -> None:
    for public in (
        "sie_server.adapters.gliner2.adapter:GLiNER2Adapter",
        "sie_server.adapters.gliner2.entities:GLiNER2EntitiesAdapter",
    ):
        assert registry.canonical(public) == "sie.adapters.gliner2:Gliner2Extractor"
        assert registry.not_served(public) is None
    assert registry.not_served("sie_server.adapters.gliner2.decide:GLiNER2DecideAdapter") is not None


@pytest.mark.parametrize(
    ("labels", "options", "message"),
    [
        ([], {}, NO_LABELS),
        (["person"], {"threshold": 1.5}, "threshold"),
        (["person"], {"threshold": "high"}, "threshold"),
    ],
)
def test_bad_requests_are_refused(
    extractor: Gliner2Extractor, labels: list[str], options: dict[str, object], message: str
) -> None:
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(labels, options))
    with pytest.raises(UnsupportedInput, match=message):
        extractor.prepare(TEXTS[:1], forward)
