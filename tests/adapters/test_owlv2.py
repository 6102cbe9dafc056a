"""OWLv2 detection against transformers' own recipe on the same weights (a tiny detector built from a
config, tests/builders.py): the public server's query text and square target size, boxes as
``[x, y, width, height]`` on the original pixels, the threshold, each image alone equal to it inside
a batch, and the requests the family refuses."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoTokenizer, Owlv2ForObjectDetection, Owlv2ImageProcessorPil

from sie.adapters.batch import ImageData
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.detection import NEEDS_IMAGE
from sie.adapters.owlv2 import NO_LABELS, Owlv2Detector
from sie.core.options import Capability, ComputePrecision
from sie.core.task import Task, UnsupportedInput
from tests import builders
from tests.conftest import random_png

LABELS = ["Cat", "remote control"]


IMAGES = [random_png(48, 40, 0), random_png(30, 64, 1), random_png(32, 32, 2)]


@pytest.fixture(scope="module")
def folder(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return builders.owlv2(splade_dir, tmp_path_factory.mktemp("owlv2"))


@pytest.fixture(scope="module")
def detector(folder: Path) -> Owlv2Detector:
    return Owlv2Detector.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 16))


def detect(
    detector: Owlv2Detector, images: list[bytes], **options: object
) -> list[list[tuple[str, float, list[int]]]]:
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(LABELS, options))
    extractions = detector.run(
        detector.prepare([ImageData(i, "png") for i in images], forward), forward
    ).extractions
    assert extractions is not None
    return [[(o.label, o.score, o.bbox) for o in e.objects] for e in extractions]


def reference(
    folder: Path, images: list[bytes], threshold: float
) -> list[list[tuple[str, float, list[int]]]]:
    """transformers' OWLv2 recipe: queries through the tokenizer, pixels through the processor, boxes
    through its ``post_process_object_detection`` against the padded square."""
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    processor = Owlv2ImageProcessorPil.from_pretrained(str(folder))
    model = Owlv2ForObjectDetection.from_pretrained(str(folder), dtype=torch.float32).eval()
    decoded = [Image.open(io.BytesIO(i)).convert("RGB") for i in images]
    queries = [f"a photo of {label.lower()}" for label in LABELS] * len(decoded)
    text = tokenizer(queries, padding="max_length", truncation=True, max_length=16, return_tensors="pt")
    pixels = processor(images=decoded, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        outputs = model(
            input_ids=text["input_ids"], attention_mask=text["attention_mask"], pixel_values=pixels
        )
    sides = torch.tensor([[max(i.size)] * 2 for i in decoded])
    results = processor.post_process_object_detection(outputs, threshold=threshold, target_sizes=sides)
    return [
        [
            (LABELS[k], float(s), [int(b[0]), int(b[1]), int(b[2] - b[0]), int(b[3] - b[1])])
            for b, s, k in zip(r["boxes"].tolist(), r["scores"].tolist(), r["labels"].tolist(), strict=True)
        ]
        for r in results
    ]


def same(
    got: list[list[tuple[str, float, list[int]]]], want: list[list[tuple[str, float, list[int]]]]
) -> None:
    assert len(got) == len(want)
    for ours, theirs in zip(got, want, strict=True):
        assert [(label, box) for label, _, box in ours] == [(label, box) for label, _, box in theirs]
        np.testing.assert_allclose([s for _, s, _ in ours], [s for _, s, _ in theirs], atol=1e-6)


@pytest.mark.parametrize("threshold", [0.0, 0.5])
def test_objects_equal_transformers_recipe(detector: Owlv2Detector, folder: Path, threshold: float) -> None:
    got = detect(detector, IMAGES, score_threshold=threshold)
    same(got, reference(folder, IMAGES, threshold))
    if threshold == 0.0:
        assert all(len(objects) == 16 for objects in got)  # every patch's box, at its best label
        assert {label for objects in got for label, _, _ in objects} <= set(LABELS)
        assert all(len(box) == 4 and box[2] >= 0 and box[3] >= 0 for objects in got for _, _, box in objects)


def test_threshold_alias_and_profile_default(detector: Owlv2Detector) -> None:
    assert detect(detector, IMAGES[:1], threshold=0.5) == detect(detector, IMAGES[:1], score_threshold=0.5)
    assert detect(detector, IMAGES[:1]) == detect(detector, IMAGES[:1], score_threshold=0.1)


def test_an_image_alone_equals_it_inside_a_batch(detector: Owlv2Detector) -> None:
    together = detect(detector, IMAGES, score_threshold=0.0)
    for index, image in enumerate(IMAGES):
        same(detect(detector, [image], score_threshold=0.0), [together[index]])


@pytest.mark.parametrize(
    ("inputs", "labels", "options", "message"),
    [
        ([ImageData(IMAGES[0], "png")], [], {}, NO_LABELS),
        (["a text"], LABELS, {}, NEEDS_IMAGE),
        ([ImageData(IMAGES[0], "png")], LABELS, {"score_threshold": 2}, "score_threshold"),
        ([ImageData(b"not an image", "png")], LABELS, {}, "not an image"),
    ],
)
def test_bad_requests_are_refused(
    detector: Owlv2Detector, inputs: list[object], labels: list[str], options: dict[str, object], message: str
) -> None:
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(labels, options))
    with pytest.raises(UnsupportedInput, match=message):
        detector.prepare(inputs, forward)  # type: ignore[arg-type]


def test_an_image_bills_its_label_queries_as_the_text_tower_reads_them(
    detector: Owlv2Detector, folder: Path
) -> None:
    """``usage``: each image item bills the queries' real tokens (special ones in, padding out, a query
    past OWL's 16 positions cut there) as the forward's own tokenizer call gives them; never its
    patches (the batching weight)."""
    labels = ["Cat", "a remote control lying next to a very long sofa in a bright living room today"]
    forward = Forward(frozenset({Capability.EXTRACT}), task=Task.of(labels, {}))
    prepared = detector.prepare([ImageData(i, "png") for i in IMAGES[:2]], forward)
    queries = AutoTokenizer.from_pretrained(str(folder))(
        [f"a photo of {label.lower()}" for label in labels],
        padding="max_length",
        truncation=True,
        max_length=16,
    )
    read = [int(sum(mask)) for mask in queries["attention_mask"]]
    assert read[1] == 16 and read[0] < 16  # the long query is cut, the short one is not padded in
    assert [item.input_tokens for item in prepared] == [sum(read)] * 2
    assert all(item.cost == 16 for item in prepared)  # 32-pixel square, 8-pixel patches
