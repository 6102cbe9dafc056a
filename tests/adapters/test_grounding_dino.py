"""Grounding DINO against transformers' own recipe on the same weights (a tiny detector built from a
config, tests/builders.py): the public server's prompt (labels lowercased, each closed by a period, or
the instruction), thresholds, boxes as ``[x, y, width, height]``, phrases mapped back onto the
request's labels, each image alone equal to it inside a batch of its size, and what is refused."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import (
    AutoTokenizer,
    GroundingDinoForObjectDetection,
    GroundingDinoImageProcessorPil,
    GroundingDinoProcessor,
)

from sie.adapters.batch import ImageData
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.detection import NEEDS_IMAGE
from sie.adapters.grounding_dino import NO_PROMPT, GroundingDinoDetector, label_of
from sie.core.options import Capability, ComputePrecision
from sie.core.task import Task, UnsupportedInput
from tests import builders
from tests.conftest import random_png

LABELS = ["Cat", "red remote control"]
Objects = list[list[tuple[str, float, list[int]]]]


IMAGES = [random_png(48, 40, 0), random_png(30, 64, 1), random_png(80, 60, 2)]


@pytest.fixture(scope="module")
def folder(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return builders.grounding_dino(splade_dir, tmp_path_factory.mktemp("grounding-dino"))


@pytest.fixture(scope="module")
def detector(folder: Path) -> GroundingDinoDetector:
    return GroundingDinoDetector.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256))


def detect(
    detector: GroundingDinoDetector,
    images: list[bytes],
    labels: list[str] = LABELS,
    instruction: str | None = None,
    **options: object,
) -> Objects:
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(labels, options, instruction))
    extractions = detector.run(
        detector.prepare([ImageData(i, "png") for i in images], forward), forward
    ).extractions
    assert extractions is not None
    return [[(o.label, o.score, o.bbox) for o in e.objects] for e in extractions]


def reference(
    folder: Path, images: list[bytes], text: str, box: float, phrase: float
) -> list[list[tuple[str, float, list[int]]]]:
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    processor = GroundingDinoProcessor(
        image_processor=GroundingDinoImageProcessorPil.from_pretrained(str(folder)), tokenizer=tokenizer
    )
    model = GroundingDinoForObjectDetection.from_pretrained(str(folder), dtype=torch.float32).eval()
    decoded = [Image.open(io.BytesIO(i)).convert("RGB") for i in images]
    inputs = processor(images=decoded, text=[text] * len(decoded), return_tensors="pt")
    with torch.no_grad():
        outputs = model(**inputs)
    results = processor.post_process_grounded_object_detection(
        outputs,
        inputs["input_ids"],
        threshold=box,
        text_threshold=phrase,
        target_sizes=[(i.height, i.width) for i in decoded],
    )
    return [
        [
            (str(p), float(s), [int(b[0]), int(b[1]), int(b[2] - b[0]), int(b[3] - b[1])])
            for b, s, p in zip(r["boxes"].tolist(), r["scores"].tolist(), r["text_labels"], strict=True)
        ]
        for r in results
    ]


def test_objects_equal_transformers_recipe_with_phrases_mapped_to_labels(
    detector: GroundingDinoDetector, folder: Path
) -> None:
    got = detect(detector, IMAGES, box_threshold=0.0, text_threshold=0.0)
    want = reference(folder, IMAGES, "cat. red remote control.", 0.0, 0.0)
    assert [len(o) for o in got] == [len(o) for o in want] == [20, 20, 20]
    for ours, theirs in zip(got, want, strict=True):
        assert [box for _, _, box in ours] == [box for _, _, box in theirs]
        np.testing.assert_allclose([s for _, s, _ in ours], [s for _, s, _ in theirs], atol=1e-5)
        assert [label for label, _, _ in ours] == [label_of(phrase, LABELS) for phrase, _, _ in theirs]
    assert {label for objects in got for label, _, _ in objects} <= set(LABELS)


def test_box_threshold_keeps_fewer_boxes(detector: GroundingDinoDetector) -> None:
    everything = detect(detector, IMAGES[:1], box_threshold=0.0, text_threshold=0.0)[0]
    cut = float(np.median([score for _, score, _ in everything]))
    kept = detect(detector, IMAGES[:1], box_threshold=cut, text_threshold=0.0)[0]
    assert 0 < len(kept) < len(everything) and all(score > cut for _, score, _ in kept)


def test_an_instruction_is_the_prompt_when_there_are_no_labels(
    detector: GroundingDinoDetector, folder: Path
) -> None:
    got = detect(
        detector, IMAGES[:1], labels=[], instruction="Find The Cat", box_threshold=0.0, text_threshold=0.0
    )
    want = reference(folder, IMAGES[:1], "find the cat.", 0.0, 0.0)
    assert [(label, box) for label, _, box in got[0]] == [(phrase, box) for phrase, _, box in want[0]]


def test_an_image_alone_equals_it_inside_a_batch_of_its_size(detector: GroundingDinoDetector) -> None:
    same_size = [random_png(48, 40, seed) for seed in (0, 5, 6)]
    together = detect(detector, same_size, box_threshold=0.0, text_threshold=0.0)
    for index, image in enumerate(same_size):
        (alone,) = detect(detector, [image], box_threshold=0.0, text_threshold=0.0)
        assert [(label, box) for label, _, box in alone] == [
            (label, box) for label, _, box in together[index]
        ]
        np.testing.assert_allclose([s for _, s, _ in alone], [s for _, s, _ in together[index]], atol=1e-5)


@pytest.mark.parametrize("precision", [ComputePrecision.FLOAT16, ComputePrecision.BFLOAT16])
def test_half_precision_on_a_gpu_runs_its_forward(folder: Path, precision: ComputePrecision) -> None:
    """On a GPU half precision is half weights (the CPU never places them so); the dtypes a CUDA
    placement picks are run here on the CPU: without autocast the deformable attention refuses the
    float32 sampling grid it builds beside half features."""
    detector = GroundingDinoDetector.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 256))
    weights = detector._place(LoadSpec(folder, "cuda", precision, 256))
    half = torch.float16 if precision is ComputePrecision.FLOAT16 else torch.bfloat16
    assert (weights, detector._autocast, detector._pixel_dtype) == (half, half, half)
    detector.device = torch.device("cpu")
    detector.model.to(weights)
    objects = detect(detector, IMAGES, box_threshold=0.0, text_threshold=0.0)
    assert [len(o) for o in objects] == [20, 20, 20]
    assert all(0.0 <= score <= 1.0 for found in objects for _, score, _ in found)


@pytest.mark.parametrize(
    ("phrase", "label"),
    [
        ("red remote", "red remote control"),
        ("cat", "Cat"),
        ("remote control cat", "Cat"),  # all of Cat's words beat two of three
        ("red remote control cat", "red remote control"),  # all of both: the one explaining more
        ("dog", "dog"),
    ],
)
def test_a_phrase_maps_onto_the_label_it_overlaps_most(phrase: str, label: str) -> None:
    assert label_of(phrase, LABELS) == label


@pytest.mark.parametrize(
    ("inputs", "labels", "options", "message"),
    [
        ([ImageData(IMAGES[0], "png")], [], {}, NO_PROMPT),
        (["a text"], LABELS, {}, NEEDS_IMAGE),
        ([ImageData(IMAGES[0], "png")], LABELS, {"box_threshold": -1}, "box_threshold"),
        ([ImageData(IMAGES[0], "png")], LABELS, {"text_threshold": "high"}, "text_threshold"),
    ],
)
def test_bad_requests_are_refused(
    detector: GroundingDinoDetector,
    inputs: list[object],
    labels: list[str],
    options: dict[str, object],
    message: str,
) -> None:
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(labels, options))
    with pytest.raises(UnsupportedInput, match=message):
        detector.prepare(inputs, forward)  # type: ignore[arg-type]


def test_an_image_bills_the_prompt_as_the_processor_tokenizes_it(
    detector: GroundingDinoDetector, folder: Path
) -> None:
    """``usage``: each image item bills the labels' prompt ("cat. red remote control.") with its
    special tokens, as transformers' processor gives the text encoder; not the 20 queries it weighs."""
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(LABELS, {}))
    prepared = detector.prepare([ImageData(i, "png") for i in IMAGES], forward)
    processor = GroundingDinoProcessor(
        image_processor=GroundingDinoImageProcessorPil.from_pretrained(str(folder)),
        tokenizer=AutoTokenizer.from_pretrained(str(folder)),
    )
    page = Image.open(io.BytesIO(IMAGES[0])).convert("RGB")
    ids = processor(images=[page], text=["cat. red remote control."])["input_ids"][0]
    assert [item.input_tokens for item in prepared] == [len(ids)] * 3
    assert len(ids) > 2 and all(item.cost == 20 for item in prepared)
